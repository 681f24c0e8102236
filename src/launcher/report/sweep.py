"""The sweep report: every member's steady-window figures in one table, the axes that changed, the ranking by one
metric with each run's 95% confidence interval, and the overlaid plots of `compare` (N runs).

Built on `compare.compare_runs` (itself on `analyze`), so every figure is the one each run's own report shows.
The interval is Student's t over the steady window's per-step values; consecutive GRPO steps are correlated
(the same policy drifting), so it is narrower than an interval over independent runs would be: the report says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.run import placement
from launcher.report.build import _jsonable, dumps
from launcher.report.compare import ROWS, compare_runs, plots_and_notes
from launcher.report.load import Run
from launcher.report.markdown import HEADLINE, num
from launcher.report.stats import SCORE_KEY, STEP_TIME_KEY, CLIP_KEY, column, throughput_total

DEFAULT_METRIC = SCORE_KEY
# metrics where smaller is better; every other metric ranks largest first (`--goal` overrides)
LOWER_IS_BETTER = frozenset({STEP_TIME_KEY, CLIP_KEY})
CONFIDENCE = 0.95
REPORT_MD = "sweep.md"
REPORT_JSON = "sweep-report.json"


def default_goal(metric: str) -> str:
    """"min" for a metric where less is better (step time, clip ratio), else "max"."""
    return "min" if metric in LOWER_IS_BETTER else "max"


def mean_ci(values: np.ndarray | Sequence[float], confidence: float = CONFIDENCE) -> dict:
    """Mean, sample std, n and a Student-t interval of the mean over the finite values (interval null below n=2)."""
    from scipy import stats as st

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return {"mean": None, "std": None, "n": 0, "ci95": None}
    mean = float(v.mean())
    if n < 2:
        return {"mean": mean, "std": None, "n": n, "ci95": None}
    std = float(v.std(ddof=1))
    half = float(st.t.ppf(0.5 + confidence / 2, n - 1)) * std / np.sqrt(n)
    return {"mean": mean, "std": std, "n": n, "ci95": [mean - half, mean + half]}


def metric_values(run: Run, metric: str, warmup_steps: int) -> np.ndarray:
    """The metric's per-step values over the steady window (`throughput_total` is derived, as the report does)."""
    rows = run.training_rows[warmup_steps:]
    return throughput_total(rows) if metric == "throughput_total" else column(rows, metric)


def rank(entries: Sequence[dict], goal: str) -> list[dict]:
    """Entries (each with `metric.mean`) best first; those without a figure last, in their given order."""
    scored = [e for e in entries if (e.get("metric") or {}).get("mean") is not None]
    rest = [e for e in entries if e not in scored]
    scored.sort(key=lambda e: e["metric"]["mean"], reverse=(goal == "max"))
    return scored + rest


def sweep_report(sweep_doc: dict, runs: dict[str, Run], states: dict[str, dict] | None = None, *,
                 metric: str = DEFAULT_METRIC, goal: str | None = None, warmup_steps: int = 1) -> dict:
    """The sweep report document. `runs`: job -> loaded run (members without metrics are absent and listed
    unranked); `states`: job -> {"phase", "succeeded"} as the follow ended (optional).

    Shape: {"sweep", "varied": [KEY], "metric", "goal", "simulated": [jobs run on KWOK fake nodes], "warmup_steps",
    "confidence", "runs": [{"job", "params", "state", "simulated", "metric": {"mean","std","n","ci95"},
    "headline": {...}, "training_steps", "rank"}] (best first), "best": {"job", "params", "mean", "ci95", "separated"},
    "config_diff": {field: [values]}, "notes": [...]}.
    """
    goal = goal or default_goal(metric)
    states = states or {}
    members = sweep_doc["members"]
    loaded = [m for m in members if m["job"] in runs]
    notes: list[str] = []
    cmp = compare_runs([runs[m["job"]] for m in loaded], warmup_steps) if loaded else {"runs": [], "config_diff": {},
                                                                                        "notes": []}
    by_job = {m["job"]: c for m, c in zip(loaded, cmp["runs"])}
    entries = []
    for m in members:
        c = by_job.get(m["job"])
        entry = {"job": m["job"], "params": m["params"], "state": states.get(m["job"]),
                 "simulated": placement.summary(runs[m["job"]].pods)["simulated"] if c else None,
                 "metric": mean_ci(metric_values(runs[m["job"]], metric, warmup_steps)) if c else None,
                 "headline": c["headline"] if c else None, "training_steps": c["training_steps"] if c else 0}
        if c is None:
            notes.append(f"{m['job']}: no metrics.jsonl (the run logged no step), not ranked")
        elif entry["metric"]["mean"] is None:
            notes.append(f"{m['job']}: no finite {metric} in its steady window, not ranked")
        entries.append(entry)
    ranked = rank(entries, goal)
    for i, e in enumerate(ranked, 1):
        e["rank"] = i if e.get("metric") and e["metric"]["mean"] is not None else None
    best = None
    if ranked and ranked[0]["rank"] == 1:
        top = ranked[0]
        best = {"job": top["job"], "params": top["params"], "mean": top["metric"]["mean"],
                "ci95": top["metric"]["ci95"], "separated": None}
        runner = ranked[1] if len(ranked) > 1 and ranked[1]["rank"] else None
        if runner and top["metric"]["ci95"] and runner["metric"]["ci95"]:
            lo_top, hi_top = top["metric"]["ci95"]
            lo_2, hi_2 = runner["metric"]["ci95"]
            best["separated"] = bool(lo_top > hi_2) if goal == "max" else bool(hi_top < lo_2)
            if not best["separated"]:
                notes.append(f"the best run's {int(CONFIDENCE * 100)}% interval overlaps the runner-up's "
                             f"({runner['job']}): the ranking of the top two is not clear-cut")
    if not any(e.get("rank") for e in entries) and loaded:
        notes.append(f"no run has {metric}: nothing ranked (metrics present include "
                     f"{', '.join(k for k, _ in HEADLINE[:4])})")
    notes.extend(cmp.get("notes") or [])
    simulated = sorted(e["job"] for e in entries if e["simulated"])
    return _jsonable({"sweep": sweep_doc["name"], "varied": sweep_doc["varied"], "metric": metric, "goal": goal,
                      "simulated": simulated,
                      "warmup_steps": warmup_steps, "confidence": CONFIDENCE, "runs": ranked, "best": best,
                      "config_diff": cmp.get("config_diff") or {}, "notes": notes})


def _ci(m: dict | None) -> str:
    if not m or m.get("mean") is None:
        return "n/a"
    if not m.get("ci95"):
        return f"{num(m['mean'])} (n={m['n']})"
    lo, hi = m["ci95"]
    return f"{num(m['mean'])} [{num(lo)}, {num(hi)}] (n={m['n']})"


def _value(v: Any) -> str:
    return f"`{v}`"


def render_markdown(doc: dict, plots: dict[str, str]) -> str:
    """`sweep.md`: what changed, the ranking with intervals, every run's steady figures, plots, notes."""
    varied = doc["varied"]
    out = [f"# GRPO sweep {doc['sweep']}\n"]
    if doc.get("simulated"):  # first thing a reader sees, as in each run's report
        out.append(f"> **{placement.SIMULATED_HEADLINE[0].upper()}{placement.SIMULATED_HEADLINE[1:]}** for "
                   f"{len(doc['simulated'])} of {len(doc['runs'])} runs ({', '.join(doc['simulated'])}): their pods "
                   "ran "
                   "on KWOK fake nodes and their figures come from a generated verl log, not from training.\n")
    out.append(f"{len(doc['runs'])} runs; parameters that changed: " + ", ".join(f"`{k}`" for k in varied) + ".\n")
    if doc["best"]:
        b = doc["best"]
        ci = b["ci95"]
        ci_text = f", {int(doc['confidence'] * 100)}% CI [{num(ci[0])}, {num(ci[1])}]" if ci else ""
        params = ", ".join(f"`{k}={v}`" for k, v in b["params"].items())
        out.append(f"**Best by `{doc['metric']}` ({'highest' if doc['goal'] == 'max' else 'lowest'} steady-window "
                   f"mean): `{b['job']}`** ({params}): {num(b['mean'])}{ci_text}.\n")
    else:
        out.append(f"No run has a steady-window `{doc['metric']}`: nothing ranked.\n")
    out.append(f"Steady window = all but the first {doc['warmup_steps']} training step(s) of each run. The interval "
               "is Student's t over the window's per-step values; consecutive steps are correlated, so it "
               "understates the run-to-run spread (repeat a configuration with another seed to measure that).\n")
    out.append(f"## Ranking by `{doc['metric']}`\n")
    out.append("| rank | run | " + " | ".join(f"`{k}`" for k in varied) + f" | {doc['metric']} (95% CI) | state |")
    out.append("|---" * (len(varied) + 4) + "|")
    for r in doc["runs"]:
        state = (r.get("state") or {}).get("phase", "n/a")
        out.append(f"| {r['rank'] or '–'} | `{r['job']}` | " + " | ".join(_value(r["params"].get(k)) for k in varied)
                   + f" | {_ci(r['metric'])} | {state} |")
    out.append("")
    out.append("## Steady-window figures of every run\n")
    out.append("| figure | " + " | ".join(f"`{r['job']}`" for r in doc["runs"]) + " |")
    out.append("|---" * (len(doc["runs"]) + 1) + "|")
    for k in varied:
        out.append(f"| `{k}` | " + " | ".join(_value(r["params"].get(k)) for r in doc["runs"]) + " |")
    for key, label in ROWS:
        cells = []
        for r in doc["runs"]:
            st = (r.get("headline") or {}).get(key) or {}
            cell = num(st.get("mean"))
            if st.get("std") is not None:
                cell += f" ± {num(st['std'])}"
            cells.append(cell)
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("| training steps | " + " | ".join(str(r["training_steps"]) for r in doc["runs"]) + " |")
    out.append("")
    extra = {k: v for k, v in (doc.get("config_diff") or {}).items() if k not in varied}
    if extra:
        out.append("## Other config differences\n")
        out.extend(f"- `{k}`: " + " / ".join(f"`{v}`" for v in values) for k, values in extra.items())
        out.append("")
    return "\n".join(out + plots_and_notes(plots, doc.get("notes"))).rstrip() + "\n"


def write_sweep_report(sweep_doc: dict, runs: dict[str, Run], out_dir: Path, states: dict[str, dict] | None = None,
                       *, metric: str = DEFAULT_METRIC, goal: str | None = None, warmup_steps: int = 1,
                       plots: bool = True) -> tuple[dict, dict[str, Path]]:
    """Write `sweep-report.json`, `sweep.md` and the overlaid PNGs (one curve per run, labelled by its axis
    values) into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = sweep_report(sweep_doc, runs, states, metric=metric, goal=goal, warmup_steps=warmup_steps)
    written: dict[str, Path] = {}
    params = {m["job"]: m["params"] for m in sweep_doc["members"]}
    members = [m["job"] for m in sweep_doc["members"] if m["job"] in runs]
    if plots and members:
        from launcher.report.plots import write_compare_plots

        labelled = [dataclasses.replace(runs[j], name=" ".join(f"{k.rsplit('.', 1)[-1]}={v}"
                                                                for k, v in params[j].items())) for j in members]
        written.update(write_compare_plots(labelled, [warmup_steps] * len(labelled), out_dir))
    (out_dir / REPORT_JSON).write_text(dumps(doc), encoding="utf-8")
    written[REPORT_JSON] = out_dir / REPORT_JSON
    md = render_markdown(doc, {k: p.name for k, p in written.items() if p.suffix == ".png"})
    (out_dir / REPORT_MD).write_text(md, encoding="utf-8")
    written[REPORT_MD] = out_dir / REPORT_MD
    return doc, written
