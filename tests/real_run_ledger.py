"""The suite's ledger of real verl runs: how many a test session started and how long each took.

Judged by what Kubernetes and verl recorded, not by what a test meant to do: when a test's namespace is torn down
(tests/e2e/conftest.py), every job there (pods grouped by `app.kubernetes.io/instance`) that had a pod on a real
node (label `grpo.launcher.io/node-kind=real`) and whose pods' logs hold at least one of verl's step lines (read with
the launcher's own parser; the smoke workload's `smoke/*` lines are not verl's) is one real run. Its time runs from
its first pod's start to its last container's end (teardown time for a pod still running). A smoke job, a KWOK pod
or a run that never reached a step is not one.

A run whose job was deleted before the teardown (the watchdog's `stop`/`delete`, `doctor`'s clean-up) has no pods
left to read: its run directory under the test's `tmp_path` still holds what the pods served (`logs/<pod>.log`, the
raw lines), where each pod ran (`pods.json`, from the Node objects) and the kubelet's timestamps of each container's
first and last line (`attempts.json`), and `record_saved` reads it from there.

Each record is one JSON line in the file named by GRPO_REAL_RUNS_FILE, tagged with GRPO_TEST_SESSION: several
pytest sessions (xdist workers, `make test`'s lanes) append to one file, and each session's summary (tests/conftest.py)
and `.ci/run`'s closing table (hack/ci/times.py) read it back.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from launcher.spec.names import INSTANCE_LABEL

FILE_ENV = "GRPO_REAL_RUNS_FILE"
SESSION_ENV = "GRPO_TEST_SESSION"
REAL_NODE_LABEL = ("grpo.launcher.io/node-kind", "real")


def _stamp(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _steps(text: str) -> set[int]:
    """The steps of verl's own step lines in `text`; the smoke workload's lines (verl's format, `smoke/*` metrics:
    launcher.entrypoint.smoke) are not verl training."""
    from launcher.metrics import parse_line

    found = set()
    for line in text.splitlines():
        rec = parse_line(line)
        if rec is not None and not any(key.startswith("smoke/") for key in rec.metrics):
            found.add(rec.step)
    return found


def _logs(core, pod) -> str:
    """Every container's log, the previous instance's too (a restarted container's steps are in it)."""
    from kubernetes.client.rest import ApiException

    text = []
    for c in pod.spec.containers:
        for previous in (True, False):
            try:
                text.append(core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace, container=c.name,
                                                         previous=previous))
            except ApiException:
                pass  # no previous instance, or the pod is gone
    return "\n".join(text)


def real_runs(api, namespace: str, now: float | None = None) -> list[dict]:
    """The real verl runs in `namespace` as Kubernetes and verl recorded them (see the module docstring)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    key, value = REAL_NODE_LABEL
    real = {n.metadata.name for n in core.list_node(label_selector=f"{key}={value}").items}
    groups: dict[str, list] = defaultdict(list)
    for pod in core.list_namespaced_pod(namespace).items:
        groups[(pod.metadata.labels or {}).get(INSTANCE_LABEL, pod.metadata.name)].append(pod)
    now = time.time() if now is None else now
    runs = []
    for job, pods in sorted(groups.items()):
        if not any(p.spec.node_name in real for p in pods):
            continue
        steps = set().union(*(_steps(_logs(core, p)) for p in pods))
        if not steps:
            continue
        starts = [s for p in pods if (s := _stamp(p.status.start_time)) is not None]
        ends = []
        for p in pods:
            for cs in (p.status.container_statuses or []):
                term = cs.state.terminated if cs.state else None
                ends.append(_stamp(term.finished_at) if term and term.finished_at else now)
        start = min(starts) if starts else now
        runs.append({"job": job, "namespace": namespace, "pods": len(pods),
                     "nodes": sorted({p.spec.node_name for p in pods if p.spec.node_name in real}),
                     "steps": len(steps), "seconds": round(max(ends, default=now) - start, 1)})
    return runs


def saved_runs(root: Path, namespace: str, skip: set[str] = frozenset()) -> list[dict]:
    """The real verl runs whose run directories lie under `root` (a test's tmp_path), jobs in `skip` left out: a pod on
    a node `pods.json` records as real, verl step lines in the saved logs, the time from the attempts' first to last
    line (see the module docstring)."""
    from launcher.run import attempts, placement

    runs = []
    for pods_file in sorted(root.glob(f"**/{placement.PODS_FILE}")):
        run = pods_file.parent
        pods = placement.load(run) or {}
        nodes = sorted({p["node"] for p in pods.values() if p.get("simulated") is False and p.get("node")})
        if run.name in skip or not nodes:
            continue
        steps = set().union(*(_steps(p.read_text(errors="replace")) for p in run.glob("logs/*.log")))
        if not steps:
            continue
        streams = list((attempts.load(run).get("streams") or {}).values())
        firsts = [s["first_ns"] for s in streams if s.get("first_ns") is not None]
        lasts = [s["last_ns"] for s in streams if s.get("last_ns") is not None]
        seconds = round((max(lasts) - min(firsts)) / 1e9, 1) if firsts and lasts else 0.0
        runs.append({"job": run.name, "namespace": namespace, "pods": len(pods), "nodes": nodes,
                     "steps": len(steps), "seconds": seconds, "from": "run directory"})
    return runs


def record(api, namespace: str, test: str, job: str | None = None, saved_under: Path | None = None) -> None:
    """Append this namespace's real runs (only `job`'s when given) to the ledger (nothing when GRPO_REAL_RUNS_FILE is
    unset); with `saved_under`, also the runs whose jobs are gone but whose run directories lie there."""
    path = os.environ.get(FILE_ENV)
    if not path:
        return
    live = real_runs(api, namespace)
    found = [run for run in live if job is None or run["job"] == job]
    if saved_under is not None:
        found += saved_runs(saved_under, namespace, {run["job"] for run in live})
    lines = [json.dumps({**run, "test": test, "session": os.environ.get(SESSION_ENV, "")}) + "\n" for run in found]
    if lines:
        with open(path, "a", encoding="utf-8") as fh:  # one write per test: xdist workers append to one file
            fh.write("".join(lines))


def read(path: str | Path, session: str | None = None) -> list[dict]:
    """The ledger's records, of one session when `session` is given."""
    p = Path(path)
    if not p.is_file():
        return []
    out = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in out if session is None or r.get("session") == session]


def summary(records: list[dict]) -> list[str]:
    """Lines for a terminal: the count, the total time, then each run (longest first)."""
    if not records:
        return ["real verl runs: 0"]
    total = sum(r["seconds"] for r in records)
    lines = [f"real verl runs: {len(records)}, {total / 60:.1f} min of run time in all"]
    for r in sorted(records, key=lambda r: -r["seconds"]):
        lines.append(f"  {r['seconds']:7.0f} s  {r['steps']:3d} steps  {r['job']:<44.44} {r['test']}")
    return lines
