"""The contract between the launcher and its pods: environment names and the marker lines the entrypoint
prints for the launcher to read back from the pod log.

Both sides import this module (the entrypoint in the pod, the launcher's follower and report), so the text
one writes is the text the other parses. Pure: no Kubernetes, no verl.

Eval markers (`launcher eval`; read by `launcher.run.eval`):

    [eval] model=base path=<model path>                       before the base model's verl run
    [eval] model=checkpoint step=25 path=<merged dir>         before the checkpoint's verl run
    [eval] questions {"model": "base", "n": 1319, ...}        after a run: per-question scores
    [eval] done model=base status=0                           after a run: verl's exit status
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

# `submit --new` renders this into every pod: the first start that sees a new token sets the run's earlier
# checkpoints aside (`launcher.entrypoint.resume.start_over`).
START_OVER_ENV = "LAUNCHER_START_OVER"
# The attempt's name (the pod's restart), set by the entrypoint for its child and read back in metrics files.
ATTEMPT_ENV = "LAUNCHER_ATTEMPT"


def attempt_id(env: Mapping[str, str]) -> str:
    """Name of this attempt's metrics file: LAUNCHER_ATTEMPT, else the UTC start time."""
    return env.get(ATTEMPT_ENV) or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


LABELS = ("base", "checkpoint")
PREFIX = "[eval] "

# The marker may follow a kubectl/CRI timestamp or a Ray prefix in the raw log: search, anchored at
# the end, for the entrypoint's own text (model paths are printable and never contain " step=").
_MARKER = re.compile(r"\[eval\] model=(base|checkpoint)(?: step=(\d+))?(?: path=(.*))?$")
_QUESTIONS = re.compile(r"\[eval\] questions (\{.*\})$")
_DONE = re.compile(r"\[eval\] done model=(base|checkpoint) status=(-?\d+)$")


def marker_line(label: str, *, model: str, step: int | None = None) -> str:
    """The line printed before one model's verl run (without newline)."""
    if label not in LABELS:
        raise ValueError(f"label must be one of {LABELS}, got {label!r}")
    text = f"{PREFIX}model={label}"
    if step is not None:
        text += f" step={int(step)}"
    return f"{text} path={model}"


def done_line(label: str, status: int) -> str:
    """The line printed after one model's verl run: its exit status."""
    return f"{PREFIX}done model={label} status={int(status)}"


def question_id(prompt: str, ground_truth: Any) -> str:
    """A stable id for one test question: the same text and answer give the same id in every run."""
    return hashlib.sha256(f"{prompt}\x00{ground_truth}".encode()).hexdigest()[:16]


def questions_payload(label: str, rows: Iterable[Mapping[str, Any]],
                      flexible: Mapping[str, float] | None = None) -> dict:
    """Per-question scores from verl's validation dump rows (`input`, `gts`, `score`).

    Several rows of one question (val_kwargs.n > 1) are averaged; with greedy decoding n is 1 and
    scores are 0/1. `flexible` maps question id → re-scored value (verl's `method="flexible"`).
    Lists follow the sorted ids; `ids_sha256` names that order so pairing can be checked.
    """
    sums: dict[str, list[float]] = {}
    for row in rows:
        qid = question_id(str(row.get("input", "")), row.get("gts"))
        acc = sums.setdefault(qid, [0.0, 0])
        acc[0] += float(row.get("score") or 0.0)
        acc[1] += 1
    ids = sorted(sums)
    out = {
        "model": label,
        "n": len(ids),
        "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "strict": [_num(sums[i][0] / sums[i][1]) for i in ids],
    }
    if flexible is not None and all(i in flexible for i in ids):
        out["flexible"] = [_num(flexible[i]) for i in ids]
    return out


def _num(x: float) -> float | int:
    """0/1 as ints keep the log line short; anything else rounded."""
    return int(x) if x in (0.0, 1.0) else round(float(x), 6)


def questions_line(payload: Mapping[str, Any]) -> str:
    """The `[eval] questions {...}` line (compact JSON on one line)."""
    return PREFIX + "questions " + json.dumps(payload, separators=(",", ":"), sort_keys=True)
