"""Compare runs: headline figures side by side (steady windows), config differences, overlaid plots.

Built on `analyze`, so every figure here is the one each run's own report shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.report.build import SECTION_PROVIDERS, _jsonable, analyze, dumps
from launcher.report.load import Run, flatten
from launcher.report.markdown import HEADLINE, num, stat_of
from launcher.report.stats import PEARSON_PAIR, SCORE_KEY, STEP_TIME_KEY, column

ABSENT = "<absent>"
LAST_N = 5  # "score over the last 5 steps": where the run ended up, not its average


def _unique_names(runs: Sequence[Run]) -> list[str]:
    """Each run's experiment name; where several share one (a sweep's members), the run directory's name (the job
    name, with its config hash), and the path only when even that repeats."""
    names = [r.name for r in runs]
    dirs = [Path(r.path).name for r in runs]
    return [n if names.count(n) == 1 else d if dirs.count(d) == 1 else f"{n} ({r.path})"
            for n, d, r in zip(names, dirs, runs)]


def config_diff(specs: Sequence[dict | None]) -> dict[str, list[Any]]:
    """Dotted config fields whose values differ between the specs, with each run's value.

    A field missing from one spec shows as `<absent>`; runs without a spec are left out of the
    comparison (the caller notes them), so a missing file does not make every field "differ".
    """
    flats = [flatten(s) if s else None for s in specs]
    present = [f for f in flats if f is not None]
    keys = sorted(set().union(*present)) if present else []
    diff: dict[str, list[Any]] = {}
    for k in keys:
        values = [f.get(k, ABSENT) if f is not None else None for f in flats]
        seen = [v for v, f in zip(values, flats) if f is not None]
        if any(v != seen[0] for v in seen[1:]):
            diff[k] = values
    return diff


def compare_runs(runs: Sequence[Run], warmup_steps: int = 1) -> dict:
    """The `compare.json` document: per run its headline figures (steady window), plus config diff.

    Shape: {"warmup_steps": K, "runs": [{"name", "path", "training_steps", "zero_signal_fraction",
    "recommendations": [ids], "headline": {key: {"mean", "std", "n"}}}], "config_diff": {field: [values]},
    "notes": [...]}.
    """
    names = _unique_names(runs)
    out_runs = []
    notes: list[str] = []
    for name, run in zip(names, runs):
        doc = analyze(run, warmup_steps)
        steady = doc["windows"]["steady"]
        headline = {}
        for key, _ in HEADLINE:
            st = stat_of(steady, key)
            headline[key] = {"mean": st.get("mean"), "std": st.get("std"), "n": st.get("n", 0)}
        score = column(run.training_rows, SCORE_KEY)
        score = score[np.isfinite(score)][-LAST_N:]
        headline[f"{SCORE_KEY}@last{LAST_N}"] = {
            "mean": float(score.mean()) if score.size else None,
            "std": None,
            "n": int(score.size),
        }
        times = column(run.training_rows, STEP_TIME_KEY)
        times = times[np.isfinite(times)]
        headline["timing_s/step@sum_all"] = {
            "mean": float(times.sum()) if times.size else None,
            "std": None,
            "n": int(times.size),
        }
        p = doc["pearson"]["steady"][PEARSON_PAIR]
        out_runs.append(
            {
                "name": name,
                "path": str(run.path),
                "training_steps": doc["training_steps"],
                "zero_signal_steps": doc["zero_signal_steps"],
                "zero_signal_fraction": doc["zero_signal_fraction"],
                "pearson_steady": p,
                "recommendations": [r["id"] for r in doc["recommendations"]],
                "headline": headline,
            }
        )
        if run.spec is None:
            notes.append(f"{name}: no spec.yaml, left out of the config comparison")
        notes.extend(f"{name}: {n}" for n in doc["notes"])
    return _jsonable(
        {
            "warmup_steps": warmup_steps,
            "runs": out_runs,
            "config_diff": config_diff([r.spec for r in runs]),
            "notes": notes,
        }
    )


ROWS: list[tuple[str, str]] = [
    *HEADLINE,
    (f"{SCORE_KEY}@last{LAST_N}", f"score, last {LAST_N} steps"),
    ("timing_s/step@sum_all", "total step time, all steps (s)"),
]


def plots_and_notes(plots: dict[str, str], notes: Sequence[str] | None) -> list[str]:
    """The markdown lines that end a comparison or sweep report: its plots, then its notes (each only if any)."""
    out = ["## Plots\n", *(f"![{name}]({file})\n" for name, file in plots.items())] if plots else []
    return out + (["## Notes\n", *(f"- {n}" for n in notes), ""] if notes else [])


def render_markdown(doc: dict, plots: dict[str, str]) -> str:
    """`compare.md`: headline table (steady means; a B − A column for two runs), config diff, plots."""
    runs = doc["runs"]
    names = [r["name"] for r in runs]
    two = len(runs) == 2
    out: list[str] = [f"# GRPO run comparison: {' vs '.join(names)}\n"]
    out.append(
        f"Steady window = all but the first {doc['warmup_steps']} training step(s) of each run; "
        "figures are steady-window means ± sample std unless the row says otherwise.\n"
    )
    out.append("## Headline figures\n")
    head = "| figure | " + " | ".join(names) + (" | B − A | B / A |" if two else " |")
    out.append(head)
    out.append("|---" * (len(names) + 1 + (2 if two else 0)) + "|")
    for key, label in ROWS:
        cells = []
        for r in runs:
            st = r["headline"].get(key, {})
            cell = num(st.get("mean"))
            if st.get("std") is not None:
                cell += f" ± {num(st['std'])}"
            cells.append(cell)
        row = f"| {label} | " + " | ".join(cells)
        if two:
            a, b = (r["headline"].get(key, {}).get("mean") for r in runs)
            row += f" | {num(b - a) if a is not None and b is not None else 'n/a'}"
            # a ratio of signed figures (pg loss) or of a zero baseline means nothing
            row += f" | {num(b / a) if a is not None and b is not None and a > 0 and b >= 0 else 'n/a'}"
        out.append(row + " |")
    extra = [
        ("training steps", lambda r: str(r["training_steps"])),
        (
            "zero-signal steps",
            lambda r: (
                f"{len(r['zero_signal_steps'])}"
                + (f" ({r['zero_signal_fraction']:.0%})" if r["zero_signal_fraction"] is not None else " (n/a)")
            ),
        ),
        (
            "r(score, clip ratio), steady",
            lambda r: f"{num(r['pearson_steady'].get('r'))} (n={r['pearson_steady'].get('n', 0)})",
        ),
        ("recommendations", lambda r: ", ".join(f"`{i}`" for i in r["recommendations"]) or "none"),
    ]
    for label, fn in extra:
        out.append(f"| {label} | " + " | ".join(fn(r) for r in runs) + (" | | |" if two else " |"))
    out.append("")

    out.append("## What changed in the configs\n")
    diff = doc.get("config_diff") or {}
    if diff:
        out.append("| field | " + " | ".join(names) + " |")
        out.append("|---" * (len(names) + 1) + "|")
        for k, values in diff.items():
            out.append(f"| `{k}` | " + " | ".join("n/a" if v is None else f"`{v}`" for v in values) + " |")
        out.append("")
    else:
        out.append("No differences found (or no run has a spec.yaml).\n")

    return "\n".join(out + plots_and_notes(plots, doc.get("notes"))).rstrip() + "\n"


def write_compare(
    runs: Sequence[Run], out_dir: Path, warmup_steps: int = 1, plots: bool = True
) -> tuple[dict, dict[str, Path]]:
    """Write `compare.json`, `compare.md` and the overlaid PNGs into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = compare_runs(runs, warmup_steps)
    # Extra sections (e.g. the GSM8K evaluation) of each run, from report's SECTION_PROVIDERS.
    sections = []
    for name, run in zip(_unique_names(runs), runs):
        for provider in SECTION_PROVIDERS:
            section = provider(run, doc)
            if section is not None:
                sections.append((name, section))
    if sections:
        doc["sections"] = {f"{name}/{s.key}": _jsonable(s.data) for name, s in sections if s.data is not None}
    written: dict[str, Path] = {}
    if plots:
        from launcher.report.plots import write_compare_plots

        written.update(write_compare_plots(runs, [warmup_steps] * len(runs), out_dir))
    (out_dir / "compare.json").write_text(dumps(doc), encoding="utf-8")
    written["compare.json"] = out_dir / "compare.json"
    md = render_markdown(doc, {k: p.name for k, p in written.items() if p.suffix == ".png"})
    md += "".join(f"\n## {s.title}: {name}\n\n{s.markdown.rstrip()}\n" for name, s in sections)
    (out_dir / "compare.md").write_text(md, encoding="utf-8")
    written["compare.md"] = out_dir / "compare.md"
    return doc, written
