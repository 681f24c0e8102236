"""Incidents: what the watchdog captured at the moment of a stall, one directory each under `runs/<job>/incidents/`.

    incidents/<UTC time>/incident.json   the finding, the verdict (`launcher.run.hang`), the action taken, the last
                                         completed step with its phase timings, the pods' and nodes' state
    incidents/<UTC time>/stacks/<pod>.txt  every read process's Python stacks, as py-spy prints them
    incidents/<UTC time>/stacks/<pod>.json the capture as taken (`launcher.kube.stacks`)
    incidents/<UTC time>/logs/<pod>.log    the last lines of the pod's log

Pure file handling: the capture itself is `launcher.cli.incident`.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.run.dirs import write_atomic

INCIDENT_FILE = "incident.json"
TIMING_PREFIX = "timing_s/"


def last_step(rows: list[dict]) -> dict | None:
    """The newest step of `metrics.jsonl` rows with its phase timings (`timing_s/*`), or None."""
    steps = [r for r in rows if isinstance(r.get("step"), int)]
    if not steps:
        return None
    row = max(steps, key=lambda r: r["step"])
    return {"step": row["step"], "timings_s": {k[len(TIMING_PREFIX):]: v for k, v in sorted(row.items())
                                               if k.startswith(TIMING_PREFIX)}}


def stacks_text(capture: dict) -> str:
    """A pod's capture as text: each process (pid, state, command line), then each thread's frames, innermost first."""
    from launcher.run.hang import SUSPECT_STATES, frame_text

    lines = [f"py-spy: {capture.get('py_spy') or 'not found'}"]
    for p in capture.get("processes") or []:
        state = p.get("state")
        note = f" [{SUSPECT_STATES[state]}]" if state in SUSPECT_STATES else ""
        lines.append(f"\nprocess {p.get('pid')} (parent {p.get('ppid')}, state {state}{note}, "
                     f"rss {p.get('rss_kib', 0) // 1024} MiB): {p.get('cmdline') or p.get('comm')}")
        if p.get("error"):
            lines.append(f"  stacks not read: {p['error']}")
        for t in p.get("threads") or []:
            flags = "active" if t.get("active") else "idle"
            lines.append(f"  thread {t.get('thread_id')} ({flags}) {t.get('thread_name') or ''}".rstrip())
            lines += [f"    {frame_text(f)}" for f in t.get("frames") or []]
    return "\n".join(lines) + "\n"


def write_incident(directory: Path, record: dict, captures: dict[str, dict], logs: dict[str, str]) -> Path:
    """Write one incident (see the module); `record` becomes incident.json. Returns the directory."""
    for pod, capture in captures.items():
        write_atomic(directory / "stacks" / f"{pod}.json", json.dumps(capture, indent=1, sort_keys=True) + "\n")
        write_atomic(directory / "stacks" / f"{pod}.txt", stacks_text(capture))
    for pod, text in logs.items():
        write_atomic(directory / "logs" / f"{pod}.log", text)
    write_atomic(directory / INCIDENT_FILE, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    return directory


def load_incidents(run_path: Path) -> list[dict]:
    """The run's incidents, oldest first: each incident.json with `id` (its directory's name) and `path`."""
    out = []
    for path in sorted((run_path / "incidents").glob(f"*/{INCIDENT_FILE}")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            out.append({**rec, "id": path.parent.name, "path": str(path.parent)})
    return out


def describe(incident: dict) -> str:
    """One line: `<id>: stall after step N, class (why); action`."""
    verdict = incident.get("verdict") or {}
    step = (incident.get("last_step") or {}).get("step")
    action = incident.get("action") or "report"
    return (f"{incident.get('id')}: stall after step {step if step is not None else '-'}, "
            f"{verdict.get('class', 'unknown')} ({verdict.get('why', 'no verdict')}); {action}")
