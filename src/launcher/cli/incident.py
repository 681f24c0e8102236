"""Capturing an incident when the watchdog finds a stall (`launcher.run.incidents` holds the files' layout).

For each running pod of the run: the Python stacks of its processes (`launcher.kube.stacks`, through pods/exec),
the last lines of its log, its state and its node's conditions; the verdict from those stacks
(`launcher.run.hang`) and the last completed step from the run's metrics. Any part that cannot be had (no
pods/exec, the pod gone, py-spy refused) is recorded as an error in the incident, never raised: an incident
with less evidence beats none.
"""

from __future__ import annotations

import time
from pathlib import Path

LOG_TAIL_LINES = 200


def _main_container(pod: dict) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    return containers[0].get("name") if containers else None


def _pod_state(pod: dict) -> dict:
    st = pod.get("status") or {}
    return {"name": pod["metadata"]["name"], "phase": st.get("phase"), "node": (pod.get("spec") or {}).get("nodeName"),
            "conditions": {c.get("type"): c.get("status") for c in st.get("conditions") or []},
            "containers": [{"name": cs.get("name"), "ready": cs.get("ready"), "restarts": cs.get("restartCount"),
                            "state": cs.get("state")} for cs in st.get("containerStatuses") or []]}


def _node_state(kube, name: str) -> dict:
    from launcher.errors import ClusterError
    from launcher.kube.client import NODE

    try:  # a LIST by name: the launcher's role lists nodes (GPU checks) and never gets one
        node = (kube.list(NODE, field_selector=f"metadata.name={name}") or [{}])[0]
    except ClusterError as exc:
        return {"name": name, "error": str(exc)}
    st = node.get("status") or {}
    return {"name": name, "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
            "conditions": {c.get("type"): c.get("status") for c in st.get("conditions") or []},
            "allocatable": st.get("allocatable")}


def _log_tail(kube, pod: str, container: str | None) -> str:
    from launcher.errors import ClusterError

    try:
        resp = kube.pod_log(pod, container=container, timestamps=True, tail_lines=LOG_TAIL_LINES)
        try:
            return resp.read().decode("utf-8", "replace")
        finally:
            resp.release_conn()
    except ClusterError as exc:
        return f"(log not read: {exc})\n"


def capture_incident(kube, ref, run_dir, finding, *, action: str, restarts: int = 0, budget: int | None = None,
                     clock=time.time) -> dict:
    """Capture and write one incident for `finding` (a stall); returns its record (incident.json plus `id`, `path`)."""
    from launcher.errors import ClusterError
    from launcher.kube import jobs as J
    from launcher.kube.stacks import capture_stacks
    from launcher.metrics import JSONL
    from launcher.run.hang import classify
    from launcher.run.incidents import last_step, write_incident
    from launcher.cli.watchdog import json_lines

    started = clock()
    try:
        pods = J.job_pods(kube, ref)
    except ClusterError as exc:
        pods, pods_error = [], str(exc)
    else:
        pods_error = None
    captures: dict[str, dict] = {}
    errors: dict[str, str] = {}
    logs: dict[str, str] = {}
    for pod in pods:
        name, container = pod["metadata"]["name"], _main_container(pod)
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        try:
            captures[name] = capture_stacks(kube, name, container=container)
        except Exception as exc:  # noqa: BLE001 (an incident never ends the follow: the error is its evidence)
            errors[name] = str(exc) if isinstance(exc, ClusterError) else f"{type(exc).__name__}: {exc}"
        logs[name] = _log_tail(kube, name, container)
    verdict = classify(captures)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    directory = _unique(run_dir.incidents / stamp)
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "job": ref.name, "finding": finding.as_dict(), "verdict": verdict.as_dict(), "action": action,
        "restarts_before": restarts, "restart_budget": budget,
        "last_step": last_step(json_lines(run_dir.path / JSONL)),
        "pods": [_pod_state(p) for p in pods], "pods_error": pods_error,
        "nodes": [_node_state(kube, n) for n in sorted({(p.get("spec") or {}).get("nodeName") for p in pods} - {None})],
        "stack_errors": errors, "capture_s": round(clock() - started, 1),
    }
    write_incident(directory, record, captures, logs)
    return {**record, "id": directory.name, "path": str(directory)}


def _unique(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`... when an incident already has that second."""
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out
