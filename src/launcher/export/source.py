"""What an export sends: a run directory's steps, config, summary figures and tags."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.report.load import META_FILE, flatten, is_training_row, load_run

TAG_JOB = "grpo.launcher.io/job"  # the run's id: the job name (runs/<job>/); the pod's own run carries it too
TAG_EXPERIMENT = "grpo.launcher.io/experiment"
TAG_CONFIG_HASH = "grpo.launcher.io/config-hash"
TAG_SIMULATED = "grpo.launcher.io/simulated"
TAG_SOURCE = "grpo.launcher.io/source"

# The report's headline figures, logged as `report/<window>/<key>/mean` (launcher.report.build.analyze).
SUMMARY_KEYS = ("critic/score/mean", "response_length/clip_ratio", "timing_s/step", "perf/throughput",
                "actor/entropy", "actor/grad_norm")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass
class RunData:
    """One run directory, as an exporter sees it."""

    path: Path
    job: str
    rows: list[dict[str, float]]  # by step; "step" plus every numeric metric
    params: dict[str, str]  # the config, flattened ("actor.lr": "1e-06")
    summary: dict[str, float]  # the report's figures
    tags: dict[str, str] = field(default_factory=dict)
    last_step: int | None = None


def _restore_nonfinite(path: Path, rows: list[dict[str, float]]) -> None:
    """metrics.jsonl stores NaN/±inf as null (NaN once loaded); metrics.meta.json keeps which it was."""
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
        cells = meta.get("nonfinite") or {}
    except (OSError, ValueError, AttributeError):
        return
    by_step = {int(r["step"]): r for r in rows}
    for step, kv in cells.items():
        row = by_step.get(int(step))
        if row is None or not isinstance(kv, dict):
            continue
        for key, text in kv.items():
            if key in row and text in _NONFINITE:
                row[key] = _NONFINITE[text]


def param_text(value: Any) -> str:
    """A config value as an MLflow param / TensorBoard text: JSON for lists and null, else str()."""
    if value is None or isinstance(value, (list, dict, bool)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def summary_figures(run) -> dict[str, float]:
    """`report/<window>/<key>/mean` and `report/training_steps` from the report's own analysis."""
    from launcher.report.build import analyze

    doc = analyze(run)
    out: dict[str, float] = {"report/training_steps": float(doc["training_steps"])}
    if doc.get("zero_signal_fraction") is not None:
        out["report/zero_signal_fraction"] = float(doc["zero_signal_fraction"])
    for window, block in (doc.get("windows") or {}).items():
        for key in SUMMARY_KEYS:
            mean = ((block.get("metrics") or {}).get(key) or {}).get("mean")
            if mean is not None:
                out[f"report/{window}/{key}/mean"] = float(mean)
        total = (block.get("throughput_total") or {}).get("mean")
        if total is not None:
            out[f"report/{window}/throughput_total/mean"] = float(total)
    return out


def load_run_data(run_dir: str | Path, *, summary: bool = True) -> RunData:
    """Read `run_dir` (BadInput, exit 2, when it or its metrics.jsonl is missing)."""
    run = load_run(run_dir)
    _restore_nonfinite(run.path, run.rows)
    job = run.path.resolve().name
    spec = run.spec or {}
    tags = {TAG_JOB: job}
    if isinstance(spec.get("name"), str):
        tags[TAG_EXPERIMENT] = spec["name"]
    if run.pods is not None:
        from launcher.run import placement

        simulated = placement.summary(run.pods).get("simulated")
        # Say plainly when the figures come from a generated log (KWOK fake nodes), not from training.
        tags[TAG_SIMULATED] = {True: "true", False: "false"}.get(simulated, "unknown")
    tail = job.rsplit("-", 1)[-1]
    if "-" in job and len(tail) == 8 and all(c in "0123456789abcdef" for c in tail):
        tags[TAG_CONFIG_HASH] = tail
    training = [r for r in run.rows if is_training_row(r)]
    return RunData(
        path=run.path, job=job, rows=run.rows,
        params={k: param_text(v) for k, v in flatten(spec).items()},
        summary=summary_figures(run) if summary and training else {},
        tags=tags,
        last_step=int(run.rows[-1]["step"]) if run.rows else None,
    )
