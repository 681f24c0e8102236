"""GSM8K before/after evaluation: the marker lines an eval job prints and the `eval.json` built from them.

An evaluation job (`launcher eval`, component `eval`) runs verl validation-only once per model, one
after the other in the same pod: the base model (`--baseline`) first, then the trained checkpoint.
Every verl run logs its validation line at step 0, so the launcher's metrics pipeline alone cannot
tell the models apart (`MetricsSink` keeps one row per step: the second model's step-0 row replaces
the first's in `metrics.jsonl`). The entrypoint therefore prints, on stdout (the pod log):

    [eval] model=base path=<model path>                       before the base model's verl run
    [eval] model=checkpoint step=25 path=<merged dir>         before the checkpoint's verl run
    [eval] questions {"model": "base", "n": 1319, ...}        after a run: per-question scores
    [eval] done model=base status=0                           after a run: verl's exit status

and `eval_doc(lines)` splits the raw pod log on those markers: each verl validation line (parsed by
the same `metrics.parser` as training lines) belongs to the model of the last marker before it.
`write_eval_json(run_dir)` stores the result as `runs/<eval-job>/eval.json`:

    {"schema_version": 1, "headline_key": "val-core/openai/gsm8k/acc/mean@1",
     "base":       {"model": PATH, "step": null, "status": 0, "metrics": {verl val keys...},
                    "questions": {"n": N, "ids_sha256": H, "strict": [0/1...], "flexible": [0/1...]}},
     "checkpoint": {"model": PATH, "step": 25, ...}}

`questions` lists per-question scores in the order of the sorted question ids (a hash of verl's
decoded prompt and ground truth), so two models' lists pair up exactly when their `ids_sha256`
agree; the report then uses a paired bootstrap (see `launcher.report.evaluation`).

Pure: no Kubernetes, no verl; the entrypoint and the report both import it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.metrics.parser import parse_line

SCHEMA_VERSION = 1
EVAL_JSON = "eval.json"
HEADLINE_KEY = "val-core/openai/gsm8k/acc/mean@1"
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


def _is_validation(metrics: Mapping[str, Any]) -> bool:
    return any(k.startswith("val-") for k in metrics)


def eval_doc(lines: Iterable[str]) -> dict:
    """Split log lines on the markers: `{label: {"model", "step", "status", "metrics", "questions"}}`.

    A validation line before any marker is not attributed (it is no eval run's). A model evaluated
    twice in the log (a retried pod appends to the same file) keeps its last run's values.
    """
    models: dict[str, dict] = {}
    current: str | None = None
    for line in lines:
        line = line.rstrip("\r\n")
        if "[eval] " in line:
            m = _MARKER.search(line)
            if m:
                current = m.group(1)
                models[current] = {"model": m.group(3), "step": int(m.group(2)) if m.group(2) else None,
                                   "status": None, "metrics": {}, "questions": None}
                continue
            m = _QUESTIONS.search(line)
            if m:
                try:
                    payload = json.loads(m.group(1))
                except json.JSONDecodeError:
                    continue
                label = payload.get("model") if isinstance(payload, dict) else None
                if label in models:
                    models[label]["questions"] = payload
                continue
            m = _DONE.search(line)
            if m and m.group(1) in models:
                models[m.group(1)]["status"] = int(m.group(2))
                current = None
                continue
        if current is None or "step:" not in line:
            continue
        rec = parse_line(line)
        if rec is not None and _is_validation(rec.metrics):
            models[current]["metrics"] = dict(rec.metrics)
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "headline_key": HEADLINE_KEY}
    doc.update({label: models[label] for label in LABELS if label in models})
    return doc


def log_files(run_dir: Path) -> list[Path]:
    """The run's raw pod logs (`logs/*.log`), sorted by name."""
    return sorted((Path(run_dir) / "logs").glob("*.log"))


def eval_doc_from_logs(paths: Sequence[Path]) -> dict:
    """`eval_doc` over several pod logs; the models found in later files win (only one pod prints)."""
    merged: dict[str, Any] = {}
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            doc = eval_doc(f)
        merged.update({k: v for k, v in doc.items() if k in LABELS})
    return {"schema_version": SCHEMA_VERSION, "headline_key": HEADLINE_KEY,
            **{k: merged[k] for k in LABELS if k in merged}}


def write_eval_json(run_dir: Path) -> dict | None:
    """Build `eval.json` from the run's pod logs and write it; None (nothing written) without markers."""
    from launcher.runs import write_atomic

    doc = eval_doc_from_logs(log_files(run_dir))
    if not any(k in doc for k in LABELS):
        return None
    doc = _finite(doc)
    write_atomic(Path(run_dir) / EVAL_JSON, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return doc


def _finite(obj: Any) -> Any:
    """NaN/inf → None, recursively: eval.json is strict JSON, like metrics.jsonl."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def load_eval_json(path: Path) -> dict | None:
    """`eval.json` at `path` (a file or a run directory), building it from the logs when absent."""
    path = Path(path)
    run_dir = path.parent if path.is_file() else path
    file = path if path.is_file() else path / EVAL_JSON
    if file.is_file():
        return json.loads(file.read_text(encoding="utf-8"))
    return write_eval_json(run_dir) if (run_dir / "logs").is_dir() else None
