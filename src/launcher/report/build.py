"""Assemble the report: the `report.json` document, plots and `report.md` for one run.

`analyze` is pure (rows in, JSON-ready dict out); `write_report` adds the files. Extra sections
(for example the GSM8K evaluation another issue adds) plug in through `Section` and
`SECTION_PROVIDERS`, without changing this module or the `report` verb.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.run import placement
from launcher.report import diagnose, stats
from launcher.report.load import Run, is_validation_key, spec_get

SCHEMA_VERSION = 1


@dataclass
class Section:
    """An extra report section: a markdown body under `## title`, and optional JSON data stored
    under `report.json["sections"][key]`. Images are paths relative to the output directory."""

    key: str
    title: str
    markdown: str
    data: Any = None
    images: Sequence[str] = ()


# Callables `(run, report_dict) -> Section | None`, run by `write_report` after the built-in
# sections. A module adds its provider here at import time (e.g. the eval module appends one that
# reads RUN_DIR/eval.json); returning None means "nothing to add for this run".
SectionProvider = Callable[[Run, dict], "Section | None"]
SECTION_PROVIDERS: list[SectionProvider] = []


def missing_steps_note(training: list[dict]) -> list[str]:
    """A note naming the training steps between the first and the last one logged that have no row.

    verl logs every step, so a hole is a lost line: the kubelet can drop lines when it rotates a
    container's log while a follow stream reads it (its race; the launcher cannot read a rotated file
    back through the API). Saying which steps are missing beats plotting over them silently.
    """
    steps = sorted({int(r["step"]) for r in training})
    if not steps:
        return []
    missing = sorted(set(range(steps[0], steps[-1] + 1)) - set(steps))
    if not missing:
        return []
    shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
    return [f"{len(missing)} training step(s) between {steps[0]} and {steps[-1]} have no metrics line in the pod "
            f"logs read: {shown} (a line the kubelet dropped while rotating a container log, or a log cut short); "
            "their figures are missing from the tables and plots"]

def _jsonable(obj: Any) -> Any:
    """Replace NaN/inf with None recursively: `report.json` must be strict JSON (no NaN tokens)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def expected_gpus(spec: dict | None) -> int | None:
    """`resources.nodes * resources.gpus_per_node` from the spec, or None when either is absent."""
    nodes = spec_get(spec, "resources.nodes")
    per = spec_get(spec, "resources.gpus_per_node")
    if isinstance(nodes, int) and isinstance(per, int) and not isinstance(nodes, bool) and not isinstance(per, bool):
        return nodes * per
    return None


def analyze(run: Run, warmup_steps: int = 1) -> dict:
    """The `report.json` document for `run` (see ARCHITECTURE.md and the report issue's contract).

    Beyond the contract it carries: `schema_version`, `run`, `config`, `trend` (the score's slope per step over
    every training step, with its 95% interval), `zero_signal_fraction`,
    `throughput` (definitions and GPU counts), `validation`, `execution` (where the pods ran and whether
    the run was simulated on KWOK fake nodes), `notes` (what could not be computed), `sections` (extra
    sections' data), and a `note` on each Pearson entry.
    """
    if warmup_steps < 0:
        raise ValueError("warmup_steps must be >= 0")
    training = run.training_rows
    notes = list(run.notes)
    windows = stats.make_windows(training, warmup_steps)
    keys = stats.metric_keys(training)

    if not training:
        notes.append("no training steps in metrics.jsonl (only validation rows): nothing to summarise")
    elif warmup_steps >= len(training):
        notes.append(
            f"--warmup-steps {warmup_steps} >= the {len(training)} training step(s): the steady window is empty; "
            "steady figures are null"
        )
    notes += missing_steps_note(training)
    for required in (
        stats.SCORE_KEY,
        stats.CLIP_KEY,
        stats.STEP_TIME_KEY,
        stats.TOKENS_KEY,
        stats.THROUGHPUT_PER_GPU_KEY,
        diagnose.GRAD_NORM_KEY,
        diagnose.ENTROPY_KEY,
        "actor/pg_loss",
    ):
        if training and required not in keys:
            notes.append(f"{required} is absent from every training step: figures that need it are null")

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run": {"name": run.name, "path": str(run.path)},
        "config": run.spec,
        "training_steps": len(training),
        "warmup_steps": warmup_steps,
        "windows": {name: stats.window_stats(w, keys) for name, w in windows.items()},
        "pearson": {name: {stats.PEARSON_PAIR: stats.pearson(w.rows)} for name, w in windows.items()},
        "trend": stats.trend(training),
    }

    gpus_implied = stats.implied_gpus(training)
    gpus_expected = expected_gpus(run.spec)
    tp_note = None
    if gpus_implied is None:
        tp_note = (
            f"GPU count not implied: needs {stats.TOKENS_KEY}, {stats.STEP_TIME_KEY} "
            f"and {stats.THROUGHPUT_PER_GPU_KEY} on a step"
        )
    elif gpus_expected is not None and abs(gpus_implied - gpus_expected) > 0.05 * gpus_expected:
        tp_note = f"implied GPU count {gpus_implied:.2f} differs from the spec's {gpus_expected}"
    doc["throughput"] = {
        "per_gpu_key": stats.THROUGHPUT_PER_GPU_KEY,
        "per_gpu_definition": (
            "perf/total_num_tokens / (timing_s/step * n_gpus): prompt+response tokens/s per GPU (verl)"
        ),
        "total_definition": "perf/total_num_tokens / timing_s/step: prompt+response tokens/s for the whole job",
        "gpus_implied": gpus_implied,
        "gpus_expected": gpus_expected,
        "note": tp_note,
    }
    if tp_note and gpus_implied is not None:
        notes.append(tp_note)

    zero, frac, known = diagnose.zero_signal_steps(training)
    doc["zero_signal_steps"] = zero
    doc["zero_signal_fraction"] = frac
    if training and not known:
        notes.append(f"zero-signal steps not computed: no training step logged {diagnose.GRAD_NORM_KEY}")

    recs, rec_notes = diagnose.recommend(training, windows["steady"].rows, zero, run.spec)
    doc["recommendations"] = recs
    notes.extend(rec_notes)

    validation: dict[str, list[dict]] = {}
    for row in run.validation_rows:
        for k, v in row.items():
            if k != "step" and is_validation_key(k):
                validation.setdefault(k, []).append({"step": int(row["step"]), "value": v})
    doc["validation"] = validation
    # Where the pods ran: on KWOK fake nodes the figures come from a generated log (launcher.run.placement).
    doc["execution"] = placement.summary(run.pods, tiny_cpu=placement.tiny_cpu(run.spec))
    doc["notes"] = notes
    doc["sections"] = {}
    return _jsonable(doc)


def dumps(doc: dict) -> str:
    """`doc` as strict, stable JSON (NaN already replaced by null)."""
    return json.dumps(_jsonable(doc), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_report(
    run: Run,
    out_dir: Path,
    warmup_steps: int = 1,
    extra_sections: Sequence[Section] = (),
    plots: bool = True,
) -> tuple[dict, dict[str, Path]]:
    """Write `report.json`, `report.md` and the PNG plots for `run` into `out_dir`.

    Returns the JSON document and the written files by name. `extra_sections` and the sections of
    `SECTION_PROVIDERS` are appended to the markdown, and their data stored in `doc["sections"]`.
    """
    from launcher.report import markdown
    from launcher.report import plots as plotting

    out_dir.mkdir(parents=True, exist_ok=True)
    doc = analyze(run, warmup_steps)
    sections = list(extra_sections)
    for provider in SECTION_PROVIDERS:
        section = provider(run, doc)
        if section is not None:
            sections.append(section)
    for s in sections:
        if s.data is not None:
            doc["sections"][s.key] = _jsonable(s.data)
    written: dict[str, Path] = {}
    pngs: dict[str, Path] = {}
    if plots:
        pngs, skipped = plotting.write_run_plots(run, doc, out_dir)
        doc["notes"].extend(skipped)
        written.update(pngs)
    (out_dir / "report.json").write_text(dumps(doc), encoding="utf-8")
    written["report.json"] = out_dir / "report.json"
    md = markdown.render(doc, {k: p.name for k, p in pngs.items()}, sections)
    (out_dir / "report.md").write_text(md, encoding="utf-8")
    written["report.md"] = out_dir / "report.md"
    return doc, written
