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
agree; the report then uses a paired bootstrap (see `launcher.report.eval`).

Pure: no Kubernetes, no verl. The marker lines themselves are part of the launcher-pod contract
(`launcher.spec.contract`), which the entrypoint prints and this module reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.metrics.parser import parse_line
from launcher.spec.contract import _DONE, _MARKER, _QUESTIONS, LABELS

SCHEMA_VERSION = 1
EVAL_JSON = "eval.json"
HEADLINE_KEY = "val-core/openai/gsm8k/acc/mean@1"


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
    from launcher.run.dirs import write_atomic

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
