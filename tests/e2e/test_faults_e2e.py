"""Faults during a followed run on the local control plane; after each, the saved raw log equals the served
log line for line and metrics.jsonl equals simlog's ground truth: nothing lost, nothing duplicated."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import kwok_support as ks
from launcher_helpers import (cri, expected_rows, job_name, launcher, raw_lines, rows, run_launcher, serve_run,
                              submit_args, verl_lines, wait_file_rows, wait_saved_log_bytes)

pytestmark = pytest.mark.cluster
STEPS = 25


def _kube(info, ns):
    from launcher.kube import Kube

    return Kube.connect(str(info.kubeconfig), namespace=ns)


def _ref(kube, job):
    from launcher.kube import jobs as J

    return J.find_run(kube, job)


def test_stream_cut_several_times(kube_cluster, namespace, tmp_path):
    """The real API stream is closed by the follower's hook at a different place on each of the first 6
    attaches (as a network cut would), while the served log keeps growing."""
    from launcher.run.follow import LogFollower
    from launcher.run.dirs import RunDir

    ns, runs = namespace, tmp_path / "runs"
    # The 6 cuts need 18 chunks (cut at the 2nd, 3rd, 4th of an attach, twice) while the log still grows: the 42
    # lines after the first 10 come one per 0.6 s (25 s, as long as the pod runs), leaving room for slow re-attaches
    # when other tests load the machine.
    delay = "35s"
    job = job_name(ns, STEPS, delay)
    lines = verl_lines(STEPS, seed=5)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=10)
    rc, out, err = run_launcher(submit_args(ns, STEPS, delay), kube_cluster, runs)
    assert rc == 0, err
    cuts: list[int] = []

    def hook(key, chunks):
        n = len(cuts)
        for i, c in enumerate(chunks):
            if n < 6 and i == 1 + n % 3:
                cuts.append(i)
                raise ConnectionResetError("cut by test")
            yield c

    live = served.start(interval=0.6)
    try:
        kube = _kube(kube_cluster, ns)
        result = LogFollower(kube, _ref(kube, job), RunDir(runs / job), stream_hook=hook, poll_interval=0.5).run()
    finally:
        live.stop()
    assert result.state.succeeded, result
    assert len(cuts) == 6
    assert raw_lines(runs / job / "logs" / f"{job}-master-0.log") == lines
    assert rows(runs / job) == expected_rows(STEPS, seed=5)


def _pods_watch_from_1_refused(core) -> bool:
    """Does the API server answer a pods watch from resourceVersion 1 with 410 Gone?"""
    r = core.list_pod_for_all_namespaces(watch=True, resource_version="1", timeout_seconds=1, _preload_content=False)
    return b'"code":410' in r.data


def _make_the_pods_watch_cache_drop_an_event(api, ns: str) -> None:
    """Make the pods watch from resourceVersion 1 expire, as it does on any cluster that has been busy a while.

    The API server's watch cache (k8s.io/apiserver 0.35 watch_cache.go) replays any version since its first list until
    it has dropped an event from its buffer. The pods cache made that list when the API server started on an empty
    etcd (version ~1), so on a fresh quiet cluster "1" is still served (stop 40, stop 41). The buffer drops an event
    only when full with its oldest event over 75 s old (younger, it doubles): 100 pod events, a 76 s wait, then pod
    events until the watch is refused. A busy cluster (CI) refuses at once."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    if _pods_watch_from_1_refused(core):
        return
    name = "watch-cache-filler"
    core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(node_selector={"e2e.grpo-launcher/no-such-node": "true"},  # stays Pending
                              containers=[client.V1Container(name="c", image="registry.k8s.io/pause:3.10")])))
    try:
        for i in range(2100):
            if i == 100:
                time.sleep(76)  # the first 100 events now older than the buffer keeps by growing
            core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {"tick": str(i)}}})
            if i > 100 and i % 50 == 0 and _pods_watch_from_1_refused(core):
                return
        raise AssertionError("2,100 pod events did not make the pods watch from resourceVersion 1 expire")
    finally:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def test_watch_expires_410_mid_run_relists_and_loses_nothing(kube_cluster, kube_api, namespace, tmp_path):
    """The follower's pod and job watches are made to resume from resourceVersion 1, older than the API server's
    watch caches reach: the real API server answers 410 Gone ("too old resource version"), the informers list again
    and watch on, and the run is followed to the end with every line once."""
    from launcher.run.follow import LogFollower
    from launcher.run.jobstate import WatchState
    from launcher.kube.informer import ClusterStateCache
    from launcher.run.dirs import RunDir

    ns, runs = namespace, tmp_path / "runs"
    _make_the_pods_watch_cache_drop_an_event(kube_api, ns)
    # the pod runs until the test ends it (ks.finish_pods) and the rest of its log comes only after the watches
    # expired: no fixed time that a busy machine could use up before the checks
    delay = "3600s"
    job = job_name(ns, STEPS, delay)
    lines = verl_lines(STEPS, seed=12)
    fifth_step = [i for i, ln in enumerate(lines) if " step:" in ln][4]
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=fifth_step + 1)  # the first 5 steps
    rc, out, err = run_launcher(submit_args(ns, STEPS, delay), kube_cluster, runs)
    assert rc == 0, err
    kube = _kube(kube_cluster, ns)
    ref = _ref(kube, job)
    state = WatchState(kube, ref, cache=ClusterStateCache(kube))
    result: dict = {}
    follower = LogFollower(kube, ref, RunDir(runs / job), poll_interval=0.5, state=state)
    live = None
    t = threading.Thread(target=lambda: result.setdefault("r", follower.run()), daemon=True)
    t.start()
    try:
        wait_file_rows(runs / job, 3, timeout=300)
        for inf in (state.pods, state.jobs):
            for _ in range(10):
                with inf.changed:
                    inf.resource_version = "1"
                    if inf._stream is not None:
                        inf._stream.close()
                # Until the informer re-watched from "1" and read the 410, or an event read just before the cut moved
                # the version on (then cut again). Never cut a watch still on its way to the 410: under load (other
                # tests beside this one) that can take longer than any fixed pause.
                ks.wait_for(lambda i=inf: i.expired or i.resource_version != "1", timeout=60, interval=0.1,
                            what=f"the {inf.resource.plural} informer to re-watch")
                if inf.expired:
                    break
            assert inf.expired >= 1 and inf.lists >= 2, (inf.resource.plural, inf.expired, inf.lists)
        n_after = len(rows(runs / job))
        live = served.start(interval=0.2)
        log = runs / job / "logs" / f"{job}-master-0.log"
        ks.wait_for(lambda: log.exists() and raw_lines(log) == lines, timeout=300, interval=0.2,
                    what="every served line followed")
        ks.finish_pods(kube_cluster, ns, job)
        t.join(300)
    finally:
        if live is not None:
            live.stop()
        state.close()
    assert not t.is_alive()
    assert result["r"].state.succeeded, result
    assert n_after < STEPS  # the watches expired while the run was going on
    assert raw_lines(runs / job / "logs" / f"{job}-master-0.log") == lines
    assert rows(runs / job) == expected_rows(STEPS, seed=12)


def test_launcher_killed_and_restarted_mid_run(kube_cluster, namespace, tmp_path):
    ns, runs = namespace, tmp_path / "runs"
    delay = "35s"
    job = job_name(ns, STEPS, delay)
    lines = verl_lines(STEPS, seed=6)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=20)
    live = served.start(interval=0.5)
    try:
        first = launcher(submit_args(ns, STEPS, delay, "--follow"), kube_cluster, runs)
        wait_file_rows(runs / job, 5, timeout=60)
        # the premise of "prints only what the killed one had not saved": the killed follower saved its place
        saved = wait_saved_log_bytes(runs / job, f"{job}-master-0", 1, timeout=60)
        first.send_signal(signal.SIGKILL)  # no cleanup, no final state save
        first.communicate(timeout=10)
        time.sleep(2)  # more lines arrive while nobody follows
        n_before = len(rows(runs / job))
        rc, out, err = run_launcher(["logs", job, "-n", ns, "-f"], kube_cluster, runs, timeout=120)
    finally:
        live.stop()
    assert first.returncode == -signal.SIGKILL
    assert rc == 0, err[-3000:]
    assert 5 <= n_before < STEPS
    assert raw_lines(runs / job / "logs" / f"{job}-master-0.log") == lines
    assert rows(runs / job) == expected_rows(STEPS, seed=6)
    # the restarted follower printed only what the killed one had not saved
    printed = [ln for ln in out.splitlines() if ln.startswith("[master-0] ")]
    saved_lines = "".join(f"{ln}\n" for ln in lines).encode()[:saved].count(b"\n")  # what the killed one had saved
    assert 0 < len(printed) <= len(lines) - saved_lines


def test_container_restart_mid_run(kube_cluster, namespace, tmp_path):
    """KWOK cannot restart a container, so the test does what the kubelet would: it serves the old log as the
    previous container's log and a new file as the current one (a resumed verl re-logging steps with other
    values), then patches the pod's status (restartCount 1, lastState terminated) through the status
    subresource."""
    from launcher.run.follow import LogFollower
    from launcher.kube import POD
    from launcher.run.dirs import RunDir

    ns, runs = namespace, tmp_path / "runs"
    delay = "30s"
    job = job_name(ns, 6, delay)
    pod = f"{job}-master-0"
    first = verl_lines(6, seed=7)[:25]  # attempt 0 dies after step 4
    second = verl_lines(6, seed=8)  # attempt 1 starts over: steps 1..6 again, other values
    served = serve_run(kube_cluster, ns, pod, first, initial=22)
    rc, out, err = run_launcher(submit_args(ns, 6, delay), kube_cluster, runs)
    assert rc == 0, err
    kube = _kube(kube_cluster, ns)
    ks.wait_for(lambda: (kube.get(POD, pod) or {}).get("status", {}).get("phase") == "Running", 60, what="pod running")
    result: dict = {}
    follower = LogFollower(kube, _ref(kube, job), RunDir(runs / job), poll_interval=0.5)
    t = threading.Thread(target=lambda: result.setdefault("r", follower.run()), daemon=True)
    t.start()
    time.sleep(3)
    ks.append_log(served.path, first[22:])  # the old container's last words, just before it dies
    # attempt 1's log in a new file; the old file becomes the "previous" log (never rewritten)
    new = served.path.with_name("attempt1.log")
    new.write_text(cri(second[:10]))
    body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod, "namespace": ns},
            "spec": {"logs": [{"logsFile": str(new), "previousLogsFile": str(served.path), "follow": True}]}}
    ks._apply_custom(kube_cluster.api_client(), "logs", body, ns)
    cur = kube.get(POD, pod)
    statuses = cur["status"]["containerStatuses"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for cs in statuses:
        cs["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now,
                                          "startedAt": cs.get("state", {}).get("running", {}).get("startedAt", now)}}
        cs["restartCount"] = 1
        cs["state"] = {"running": {"startedAt": now}}
    kube.patch(POD, pod, {"status": {"containerStatuses": statuses}}, sub="status")
    time.sleep(1)
    ks.append_log(new, second[10:])
    t.join(120)
    assert not t.is_alive()
    assert result["r"].state.succeeded
    saved = raw_lines(runs / job / "logs" / f"{pod}.log")
    assert saved == first + second
    assert rows(runs / job) == expected_rows(6, seed=8)  # the restarted container's values won
    meta = json.loads((runs / job / "metrics.meta.json").read_text())
    # attempts are `<pod created>/<uid>/<restart>` (launcher.run.follow): restart 1 of the same pod won
    assert {r["attempt"].rsplit("/", 1)[1] for r in meta["relogged"]} == {"000001"}


KWOK_CLUSTER = ks.cluster_dir() / "kwok" / "clusters" / "grpo"


def _start_component(name: str = "kube-apiserver") -> int:
    """Start a control-plane process exactly as kwokctl did: its component entry in the cluster's kwok.yaml."""
    import yaml

    comp = None
    for doc in yaml.safe_load_all((KWOK_CLUSTER / "kwok.yaml").read_text()):
        if doc and doc.get("kind") == "KwokctlConfiguration":
            comp = next(c for c in doc.get("components") or [] if c["name"] == name)
    log = open(KWOK_CLUSTER / "logs" / f"{name}.log", "ab")
    p = subprocess.Popen([comp["binary"], *comp["args"]], cwd=comp["workDir"], stdout=log, stderr=log,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    (KWOK_CLUSTER / "pids" / f"{name}.pid").write_text(str(p.pid))
    return p.pid


def _restore_cluster(info) -> None:
    """After an API server outage: restart what died with it (kube-controller-manager and kube-scheduler
    exit on lost leader election; training-operator v1.9.0 panics), then let up.sh restore the operators."""
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        pid_file = KWOK_CLUSTER / "pids" / f"{name}.pid"
        if not pid_file.exists() or not _alive(int(pid_file.read_text().strip())):
            _start_component(name)
    ks.wait_for(lambda: info.kubectl("get", "--raw", "/readyz", check=False).returncode == 0, 90,
                what="apiserver ready again")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    subprocess.run([str(ks.HACK_CLUSTER / "up.sh")], env=env, capture_output=True, timeout=600)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class _CuttableProxy:
    """A TCP forwarder in front of kube-apiserver that the test can take away and bring back: while it is
    "down" every open connection is reset and new ones are refused (what a client sees while the API
    server restarts), without disturbing the shared control plane."""

    def __init__(self, target_port: int):
        import socket

        self.target = ("127.0.0.1", target_port)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.conns: list = []
        self.lock = threading.Lock()
        self.listener = None
        self.up()

    def up(self) -> None:
        import socket

        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self.listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def down(self) -> None:
        import socket

        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread; close() alone would not
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns.clear()

    def _accept(self, ls) -> None:
        import socket

        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass


def test_api_server_unreachable_during_follow(kube_cluster, namespace, tmp_path):
    """`submit --follow` talks to the API server through a proxy that goes away for 6 s mid-run (open
    streams reset, new connections refused) and comes back: the run is followed to the end, nothing lost
    or duplicated. The real API server keeps running (see the opt-in test above for a real restart)."""
    import yaml

    ns, runs = namespace, tmp_path / "runs"
    port = int(kube_cluster.server.rsplit(":", 1)[1])
    proxy = _CuttableProxy(port)
    kc = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    kc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    kc_path = tmp_path / "kubeconfig-via-proxy"
    kc_path.write_text(yaml.safe_dump(kc))
    delay = "35s"
    job = job_name(ns, STEPS, delay)
    lines = verl_lines(STEPS, seed=10)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=20)
    live = served.start(interval=0.5)
    try:
        proc = launcher(submit_args(ns, STEPS, delay, "--follow", "--kubeconfig", str(kc_path)), kube_cluster, runs)
        wait_file_rows(runs / job, 3, timeout=60)
        proxy.down()
        # what the launcher could have received before the cut: the step lines served by then (it may still be
        # parsing bytes it had read; on a busy machine that was more than one row: a CI-like run, 2026-12-05)
        served_at_cut = len(served.path.read_text().splitlines())
        steps_at_cut = sum("step:" in ln for ln in lines[:served_at_cut])
        time.sleep(6)
        n_during = len(rows(runs / job))
        proxy.up()
        out, err = proc.communicate(timeout=150)
    finally:
        live.stop()
        proxy.down()
    assert proc.returncode == 0, err[-3000:]
    assert "API server unavailable" in err and "reachable again" in err, err[-2000:]
    assert n_during <= steps_at_cut  # nothing served while it was away arrived
    assert raw_lines(runs / job / "logs" / f"{job}-master-0.log") == lines
    assert rows(runs / job) == expected_rows(STEPS, seed=10)
