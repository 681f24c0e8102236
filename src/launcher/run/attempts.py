"""A run's attempts, as the follower saw them: where each resumed from, steps and time lost to a restart.

Every start of the training driver prints one line (`launcher.entrypoint.resume.Decision.line`)::

    [entrypoint] attempt 2: resuming from global_step_10; steps lost: 3 (an earlier attempt logged up to step 13)
    [entrypoint] attempt 1: starting fresh (no checkpoint yet); steps lost: 0
    [entrypoint] attempt 3: starting fresh (global_step_5 skipped: incomplete ...); steps lost: 7
    [entrypoint] attempt 4: already finished at global_step_25 (...); nothing to train (submit --new starts over)

The follower (`launcher.run.follow`) hands every line of every container attempt (a *stream*: pod uid +
restart count, ordered by `<pod created>/<first line time>/<uid>/<restart>`) to `AttemptLog.observe`
with its kubelet timestamp; `runs/<job>/attempts.json` keeps,
per stream, its first and last line time, the entrypoint's line and the time of each logged step.
`summarise` turns that into one row per attempt, in the order the containers were created:

- `resumed_from`: the entrypoint's step (0 when fresh); without its line (an older image), the first
  logged step minus one;
- `steps_lost`: the entrypoint's figure, else the previous attempt's last step minus `resumed_from`;
- `time_lost_s`: how much later the run got past the previous attempt's last step than it would have
  without the restart: (time of this attempt's first step beyond it) - (time the previous attempt
  logged its last step) - (the run's median step time), never below 0. It covers the dead time, the
  rescheduling, the model reload and redoing the lost steps. While this attempt has not got that far
  it is a lower bound up to its latest step (`time_lost_final: false`).

Pure apart from reading/writing that one file; never imports the Kubernetes client.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from pathlib import Path

from launcher.metrics.parser import parse_line

FILE = "attempts.json"
FORMAT = 1
ENTRY_RE = re.compile(
    r"\[entrypoint\] attempt (?P<n>\d+): (?:(?P<resume>resuming from global_step_(?P<rstep>\d+))|(?P<fresh>starting fresh)"
    r"|(?P<finished>already finished at global_step_(?P<fstep>\d+)))(?: \((?P<detail>.*?)\))?"
    r"(?:; steps lost: (?P<lost>\d+|unknown))?"
)


def parse_attempt_line(text: str) -> dict | None:
    """The entrypoint's attempt line (anywhere in `text`, after any prefix) as a dict, or None."""
    m = ENTRY_RE.search(text)
    if not m:
        return None
    if m.group("resume"):
        action, step = "resume", int(m.group("rstep"))
    elif m.group("finished"):
        action, step = "finished", int(m.group("fstep"))
    else:
        action, step = "fresh", 0
    lost = m.group("lost")
    return {"attempt": int(m.group("n")), "action": action, "step": step,
            "steps_lost": int(lost) if lost and lost.isdigit() else (0 if action == "finished" else None),
            "detail": m.group("detail") or ""}


class AttemptLog:
    """What the follower saw of each stream, saved to `attempts.json` (atomically, at most every `interval` s)."""

    def __init__(self, run_dir: str | Path, *, interval: float = 2.0):
        from launcher.run.dirs import write_atomic

        self._write = write_atomic
        self.path = Path(run_dir) / FILE
        self.interval = interval
        self.lock = threading.Lock()
        self.streams: dict[str, dict] = load(run_dir).get("streams", {})
        self._dirty = False
        self._saved = 0.0

    def first_ns(self, stream: str, ns: int) -> int:
        """The time of `stream`'s first line: `ns` unless an earlier delivery (or a saved run) set it."""
        with self.lock:
            s = self.streams.get(stream)
            return s["first_ns"] if s and s.get("first_ns") is not None else ns

    def observe(self, stream: str, order: str, pod: str, lines: list[str], times: list[int]) -> None:
        """Lines of one stream (a container attempt; `order`: its sortable id) with their timestamps (epoch ns)."""
        with self.lock:
            s = self.streams.setdefault(stream, {"pod": pod, "first_ns": None, "last_ns": None, "entry": None,
                                                 "steps": {}})
            s["order"] = order
            for text, ns in zip(lines, times):
                if s["first_ns"] is None or ns < s["first_ns"]:
                    s["first_ns"] = ns
                if s["last_ns"] is None or ns > s["last_ns"]:
                    s["last_ns"] = ns
                if "[entrypoint] attempt " in text:
                    entry = parse_attempt_line(text)
                    if entry is not None:
                        s["entry"] = {**entry, "ns": ns}
                        continue
                if "step:" in text:
                    rec = parse_line(text)
                    if rec is not None and rec.step > 0:  # step 0 is validation before training
                        s["steps"].setdefault(str(rec.step), ns)
            self._dirty = True
        self.save()

    def save(self, force: bool = False) -> None:
        with self.lock:
            if not self._dirty or (not force and time.monotonic() - self._saved < self.interval):
                return
            self._write(self.path, json.dumps({"format": FORMAT, "streams": self.streams}, indent=1, sort_keys=True))
            self._dirty = False
            self._saved = time.monotonic()


def load(run_dir: str | Path) -> dict:
    """`attempts.json` of a run directory ({} when there is none or it is unreadable)."""
    try:
        doc = json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))


def summarise(doc: dict) -> list[dict]:
    """One row per attempt that logged an entrypoint line or a step, in container creation order."""
    streams = sorted(((s.get("order") or k, s) for k, s in (doc.get("streams") or {}).items()
                      if s.get("entry") or s.get("steps")), key=lambda ks: ks[0])
    gaps = []
    for _, s in streams:
        steps = sorted((int(k), v) for k, v in s["steps"].items())
        gaps += [(b[1] - a[1]) / 1e9 for a, b in zip(steps, steps[1:]) if b[0] == a[0] + 1 and b[1] >= a[1]]
    median_step = statistics.median(gaps) if gaps else 0.0
    rows: list[dict] = []
    prev_last: tuple[int, int] | None = None  # (step, ns) of the furthest step any earlier attempt logged
    for i, (key, s) in enumerate(streams, start=1):
        steps = sorted((int(k), v) for k, v in s["steps"].items())
        entry = s.get("entry") or {}
        action = entry.get("action") or ("resume" if steps and steps[0][0] > 1 else "fresh")
        resumed_from = entry.get("step") if entry else (steps[0][0] - 1 if steps else 0)
        lost = entry.get("steps_lost")
        if lost is None and i > 1 and prev_last is not None and action != "finished":
            lost = max(0, prev_last[0] - (resumed_from or 0))
        row = {"attempt": i, "entrypoint_attempt": entry.get("attempt"), "pod": s.get("pod"), "stream": key,
               "started": _iso(s.get("first_ns")), "action": action, "resumed_from": resumed_from,
               "first_step": steps[0][0] if steps else None, "last_step": steps[-1][0] if steps else None,
               "steps_lost": lost if i > 1 or lost is not None else 0, "time_lost_s": None, "time_lost_final": True}
        if i > 1 and prev_last is not None:
            beyond = [ns for st, ns in steps if st > prev_last[0]]
            if beyond:
                end_ns, final = beyond[0], True
            else:
                end_ns, final = (s.get("last_ns") or prev_last[1]), False
            row["time_lost_s"] = round(max(0.0, (end_ns - prev_last[1]) / 1e9 - (median_step if final else 0.0)), 1)
            row["time_lost_final"] = final
        if steps and (prev_last is None or steps[-1][0] >= prev_last[0]):
            prev_last = (steps[-1][0], steps[-1][1])
        rows.append(row)
    return rows


def restarts(rows: list[dict]) -> int:
    """Attempts after the first (each one a restart of the run)."""
    return max(0, len(rows) - 1)


def describe(row: dict) -> str:
    """One human line for an attempt (status, report)."""
    if row["action"] == "finished":
        what = f"already finished at step {row['resumed_from']}, trained nothing"
    elif row["action"] == "resume":
        what = f"resumed from global_step_{row['resumed_from']}"
    else:
        what = "fresh start"
    parts = [f"attempt {row['attempt']}", what]
    if row.get("first_step") is not None:
        parts.append(f"steps {row['first_step']}-{row['last_step']}")
    if row["attempt"] > 1:
        lost = row.get("steps_lost")
        parts.append(f"steps lost {'unknown' if lost is None else lost}")
        t = row.get("time_lost_s")
        if t is not None:
            parts.append(f"time lost {'' if row.get('time_lost_final', True) else '≥'}{t:g}s")
    if row.get("pod"):
        parts.append(f"pod {row['pod']}")
    if row.get("started"):
        parts.append(f"started {row['started']}")
    return ", ".join(parts)
