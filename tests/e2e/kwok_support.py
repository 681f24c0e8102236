"""Helpers for end-to-end tests against the grpo-launcher local control plane (hack/cluster).

Non-fixture code lives here so that tests and tools can share it; the pytest fixtures are in conftest.py.

Safety rules (the cluster under test is always *ours*):
- the kubeconfig is always the explicit path ``$GRPO_CLUSTER_DIR/kubeconfig``; ``KUBECONFIG`` and
  ``~/.kube/config`` are never read;
- a cluster is used only when the marker file written by ``hack/cluster/up.sh`` and the ConfigMap
  ``kube-system/grpo-launcher-cluster`` carry the same cluster id.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK_CLUSTER = REPO_ROOT / "hack" / "cluster"
OWNER_CONFIGMAP = "grpo-launcher-cluster"
OWNER_LABEL = ("app.kubernetes.io/managed-by", "grpo-launcher-hack-cluster")
E2E_NAMESPACE_LABEL = "grpo-launcher.e2e/namespace"

# KWOK stage annotations installed by hack/cluster/up.sh (manifests/pod-finish-stages.yaml)
POD_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
POD_FAIL_EXIT_CODE = "pod-fail.stage.kwok.x-k8s.io/exit-code"

KWOK_GROUP, KWOK_VERSION = "kwok.x-k8s.io", "v1alpha1"
CRI_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}T\S+ (stdout|stderr) [FP] ")


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_CACHE") or Path.home() / ".cache" / "grpo-launcher")


def cluster_dir() -> Path:
    return Path(os.environ.get("GRPO_CLUSTER_DIR") or cache_dir() / "cluster")


def tools_bin() -> Path:
    """Directory holding the cached kubectl and helm (hack/cluster/build.sh tools)."""
    return cache_dir() / "bin" / "tools"


class NotOurCluster(RuntimeError):
    pass


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: str
    kubeconfig: Path
    server: str
    tools_bin: Path
    served_logs: Path
    started_here: bool = False

    def api_client(self):
        from kubernetes import config

        # explicit file, explicit context: never falls back to KUBECONFIG or ~/.kube/config
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        return subprocess.run([str(self.tools_bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                              input=input, capture_output=True, text=True, check=check, timeout=timeout, env=env)


def read_marker() -> dict | None:
    p = cluster_dir() / "grpo-cluster.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def identify_cluster(started_here: bool = False) -> ClusterInfo | None:
    """Return the running cluster if it is provably the one hack/cluster/up.sh started, else None."""
    from kubernetes import client

    marker = read_marker()
    if not marker:
        return None
    kubeconfig = cluster_dir() / "kubeconfig"
    if not kubeconfig.is_file() or Path(marker.get("kubeconfig", "")) != kubeconfig:
        return None
    info = ClusterInfo(cluster_id=marker["cluster_id"], kubeconfig=kubeconfig, server=marker["server"],
                       tools_bin=Path(marker.get("tools_bin") or tools_bin()),
                       served_logs=Path(marker["served_logs"]), started_here=started_here)
    try:
        api = info.api_client()
        cm = client.CoreV1Api(api).read_namespaced_config_map(OWNER_CONFIGMAP, "kube-system", _request_timeout=5)
    except Exception:
        return None
    if (cm.data or {}).get("cluster-id") != info.cluster_id:
        return None
    if (cm.metadata.labels or {}).get(OWNER_LABEL[0]) != OWNER_LABEL[1]:
        return None
    return info


def ensure_cluster(timeout: float = 900) -> ClusterInfo:
    """Reuse our running cluster, or start one with hack/cluster/up.sh (which refuses to touch anything else)."""
    info = identify_cluster()
    if info is not None:
        return info
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run([str(HACK_CLUSTER / "up.sh")], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/cluster/up.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    info = identify_cluster(started_here=True)
    if info is None:
        raise NotOurCluster("up.sh succeeded but the cluster cannot be identified as ours")
    return info


# ---- CRI log files ---------------------------------------------------------------------------------------------

def _ts(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def to_cri(lines: Iterable[str], start: dt.datetime | None = None, step: dt.timedelta = dt.timedelta(seconds=1),
           stream: str = "stdout") -> str:
    """Plain text lines -> CRI log format (``<RFC3339Nano> stdout F <line>``), one entry per line."""
    t = start or dt.datetime.now(dt.timezone.utc)
    out = []
    for i, line in enumerate(lines):
        out.append(f"{_ts(t + i * step)} {stream} F {line.rstrip(chr(10))}\n")  # "\r" kept inside the entry
    return "".join(out)


def _split_lines(text: str) -> list[str]:
    """Split on "\n" only: verl's tqdm output uses "\r" inside one log line (str.splitlines would split it)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _as_cri_text(text_or_path: str | os.PathLike) -> str:
    if isinstance(text_or_path, os.PathLike) or (isinstance(text_or_path, str) and "\n" not in text_or_path
                                                 and os.path.isfile(text_or_path)):
        text = Path(text_or_path).read_text()
    else:
        text = str(text_or_path)
    lines = _split_lines(text)
    if lines and all(CRI_LINE.match(line) for line in lines):
        return text if text.endswith("\n") else text + "\n"
    return to_cri(lines)


def served_file(info: ClusterInfo, namespace: str, name: str) -> Path:
    # one directory per object: the follow stream (fsnotify on the directory) only wakes for its own file
    d = info.served_logs / "e2e" / namespace / name
    d.mkdir(parents=True, exist_ok=True)
    return d / "current.log"


def append_log(path: Path, lines: Iterable[str] | str, stream: str = "stdout") -> None:
    """Append lines (plain text, converted to CRI with the current time) to a served log file."""
    if isinstance(lines, str):
        lines = _split_lines(lines)
    with open(path, "a") as f:
        f.write(to_cri(lines, stream=stream))
        f.flush()


def _apply_custom(api_client, plural: str, body: dict, namespace: str | None) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    co = client.CustomObjectsApi(api_client)
    name = body["metadata"]["name"]
    try:
        if namespace:
            co.create_namespaced_custom_object(KWOK_GROUP, KWOK_VERSION, namespace, plural, body)
        else:
            co.create_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, plural, body)
    except ApiException as e:
        if e.status != 409:
            raise
        if namespace:
            cur = co.get_namespaced_custom_object(KWOK_GROUP, KWOK_VERSION, namespace, plural, name)
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            co.replace_namespaced_custom_object(KWOK_GROUP, KWOK_VERSION, namespace, plural, name, body)
        else:
            cur = co.get_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, plural, name)
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            co.replace_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, plural, name, body)


def _log_entry(path: Path, text_or_path: str | os.PathLike, previous: str | os.PathLike | None) -> dict:
    """Write the served file (and the previous container's, if any); the `logs` entry pointing at them."""
    path.write_text(_as_cri_text(text_or_path))
    entry: dict = {"logsFile": str(path), "follow": True}
    if previous is not None:
        prev = path.with_name("previous.log")
        prev.write_text(_as_cri_text(previous))
        entry["previousLogsFile"] = str(prev)
    return entry


def serve_logs(info: ClusterInfo, namespace: str, pod_name: str, text_or_path: str | os.PathLike,
               previous: str | os.PathLike | None = None, containers: list[str] | None = None) -> Path:
    """Make ``GET pods/<pod_name>/log`` return ``text_or_path`` (plain text or a file; CRI files are kept as-is).

    Writes the CRI file under the cluster's served-logs dir and applies a namespaced KWOK ``Logs`` object named
    like the pod (the pod need not exist yet). Returns the served file path (see ``append_log``).
    """
    path = served_file(info, namespace, pod_name)
    entry = _log_entry(path, text_or_path, previous)
    if containers:
        entry["containers"] = list(containers)
    body = {"apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}", "kind": "Logs",
            "metadata": {"name": pod_name, "namespace": namespace}, "spec": {"logs": [entry]}}
    _apply_custom(info.api_client(), "logs", body, namespace)
    return path


def serve_cluster_logs(info: ClusterInfo, name: str, text_or_path: str | os.PathLike, *,
                       namespaces: list[str], pod_names: list[str] | None = None,
                       previous: str | os.PathLike | None = None) -> Path:
    """Serve one log to every pod matching the selector (pods with generated names, e.g. RayJob submitters).

    ClusterLogs are cluster-scoped: the object is labelled with its first namespace so the ``namespace``
    fixture deletes it with the namespace. A namespaced ``Logs`` for the same pod wins over a ClusterLogs.
    """
    path = served_file(info, namespaces[0], f"clusterlogs-{name}")
    entry = _log_entry(path, text_or_path, previous)
    selector: dict = {"matchNamespaces": list(namespaces)}
    if pod_names:
        selector["matchNames"] = list(pod_names)
    body = {"apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}", "kind": "ClusterLogs",
            "metadata": {"name": name, "labels": {E2E_NAMESPACE_LABEL: namespaces[0]}},
            "spec": {"selector": selector, "logs": [entry]}}
    _apply_custom(info.api_client(), "clusterlogs", body, None)
    return path


class LiveLog:
    """Append lines to a served log while a test runs (simulates a live training run).

    >>> live = LiveLog(path); live.append("step:1 - ..."); live.start(lines, interval=0.5); ...; live.stop()
    """

    def __init__(self, path: Path):
        import threading

        self.path = Path(path)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def append(self, *lines: str) -> None:
        append_log(self.path, list(lines))

    def start(self, lines: Iterable[str], interval: float = 1.0) -> "LiveLog":
        import threading

        def run():
            for line in lines:
                if self._stop.wait(interval):
                    return
                self.append(line)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)


# ---- waiting ---------------------------------------------------------------------------------------------------

def hang_guard(what: str, timeout: float) -> str:
    """The message of a wait that ran out. Every wait's timeout is a hang guard, set far above the time the awaited
    thing takes on a loaded machine, so running out means it will not come; the message says so, lest a reader
    raise the timeout instead of looking for the hang."""
    return (f"hang guard: {what} not reached after {timeout:g} s "
            "(a hang, not a slow machine: the guard is far above the normal time)")


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.5, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value (returned); raise TimeoutError with the last value.
    ``timeout`` is a hang guard (see hang_guard), not the time the condition is expected to take."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = predicate()
        except Exception as e:  # transient API errors while objects appear
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"{hang_guard(what, timeout)}; last: {last!r}")
        time.sleep(interval)


def finish_pods(info: ClusterInfo, ns: str, instance: str) -> None:
    """End a run's KWOK pods now, whatever delay they were given: the completion stage re-reads its delay
    annotation when the pod changes (hack/cluster/manifests/pod-finish-stages.yaml). Tests hold a run with a long
    delay and end it here once they have looked, instead of racing a fixed time a busy machine can use up."""
    info.kubectl("annotate", "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={instance}", "--overwrite",
                 f"{POD_COMPLETE_DELAY}=0s")


def bound_hostpath_claim(info: ClusterInfo, ns: str, claim: str, pv: str, host_path: str, *,
                         size: str = "1Gi", access: str = "ReadWriteOnce") -> None:
    """A PVC `claim` in `ns` bound to a static hostPath PV `pv` (the local cluster has no provisioner), labelled for
    the namespace's clean-up. On the real nodes (one host) every pod mounting it sees the same directory."""
    info.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv, "labels": {E2E_NAMESPACE_LABEL: ns}},
         "spec": {"capacity": {"storage": size}, "accessModes": [access], "storageClassName": "",
                  "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": host_path},
                  "claimRef": {"namespace": ns, "name": claim}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": ns},
         "spec": {"accessModes": [access], "storageClassName": "", "volumeName": pv,
                  "resources": {"requests": {"storage": size}}}}]}))
    wait_for(lambda: info.kubectl("-n", ns, "get", "pvc", claim, "-o", "jsonpath={.status.phase}").stdout == "Bound",
             timeout=60, what=f"pvc {claim} bound")
