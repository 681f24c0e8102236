"""`report.md`: the write-up a user would otherwise assemble by hand, rendered from `report.json`.

Rendering only reads the JSON document, so what the markdown says and what tools read never
disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.report.load import flatten
from launcher.spec.contract import builtin_model, describe_source

# Definitions quoted from verl 0.9.1 (shared/notes/verl.md section 6), for the header.
DEFINITIONS: dict[str, str] = {
    "critic/score/mean": "Mean per-sample sequence score over the step's train_batch_size x n rollouts "
    "(non-aborted). For GSM8K the score is 0/1, so this is training-rollout accuracy at the rollout temperature.",
    "actor/entropy": "Entropy of the pre-update policy over response tokens (token-mean), computed in the "
    "old-log-prob pass. Not an entropy loss.",
    "actor/pg_loss": "Clipped PPO policy-gradient loss on GRPO advantages, averaged over mini-batches (with DP > 1 "
    "a sum over micro-batches of globally normalised values). Near 0 is normal for GRPO and alone says nothing "
    "about learning signal.",
    "actor/grad_norm": "Gradient norm returned by gradient clipping (grad_clip = 1.0). Exactly 0 means every "
    "advantage was 0: a zero-signal step.",
    "response_length/mean": "Mean response length in tokens.",
    "response_length/clip_ratio": "Fraction of samples whose response length equals max_response_length (truncated).",
    "timing_s/step": "Wall seconds from generation through weight sync, including checkpoint saving; excludes "
    "validation.",
    "perf/throughput": "verl's figure: perf/total_num_tokens / (timing_s/step x n_gpus) = prompt+response "
    "tokens/s **per GPU**.",
    "throughput_total": "This report's figure: perf/total_num_tokens / timing_s/step = prompt+response tokens/s "
    "for the **whole job** (all GPUs).",
    "perf/total_num_tokens": "Sum over all samples of prompt + response tokens (unpadded).",
}

# (key, label) of the figures shown in the headline table and by `compare`.
HEADLINE: list[tuple[str, str]] = [
    ("critic/score/mean", "score (training accuracy)"),
    ("actor/entropy", "entropy"),
    ("actor/pg_loss", "pg loss"),
    ("actor/grad_norm", "grad norm"),
    ("response_length/mean", "response length (tokens)"),
    ("response_length/clip_ratio", "clip ratio"),
    ("timing_s/step", "step time (s)"),
    ("perf/throughput", "throughput per GPU (tok/s)"),
    ("throughput_total", "throughput total (tok/s)"),
]

CONFIG_FIELDS = [
    "name",
    "backend",
    "model.path",
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "rollout.n",
    "rollout.temperature",
    "actor.lr",
    "actor.ppo_mini_batch_size",
    "actor.ppo_micro_batch_size_per_gpu",
    "algorithm.entropy_coeff",
    "trainer.total_training_steps",
    "resources.nodes",
    "resources.gpus_per_node",
    "reward.function.path",  # these two only in a config with a reward function (OMITTED_WHILE_DEFAULT)
    "reward.function.source",
    "verl.overrides",  # only in a config that has some
]


def num(x: Any) -> str:
    """A figure for a table: `n/a` for null, thousands separators for big values, 4 significant digits."""
    if x is None:
        return "n/a"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def stat_of(window: Mapping, key: str) -> Mapping:
    """The statistics block of `key` in a window (`throughput_total` included), or an empty one."""
    if key == "throughput_total":
        return window.get("throughput_total") or {}
    return (window.get("metrics") or {}).get(key) or {}


def _pm(st: Mapping) -> str:
    if st.get("mean") is None:
        return "n/a"
    return num(st["mean"]) + (f" ± {num(st['std'])}" if st.get("std") is not None else "")


def _range(st: Mapping) -> str:
    return "n/a" if st.get("min") is None else f"{num(st['min'])} – {num(st['max'])}"


def _window_line(doc: Mapping, name: str) -> str:
    w = doc["windows"][name]
    n = doc["training_steps"] if name == "all" else max(doc["training_steps"] - doc["warmup_steps"], 0)
    if w.get("first_step") is None:
        return f"empty ({n} steps)"
    return f"steps {w['first_step']}–{w['last_step']} ({n} step{'s' if n != 1 else ''})"


def _code(value: Any) -> str:
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def render(doc: Mapping, plots: Mapping[str, str], sections: Sequence[Any] = ()) -> str:
    """The markdown report for a `report.json` document, its plot file names and extra sections."""
    out: list[str] = []
    add = out.append
    run = doc.get("run", {})
    execution = doc.get("execution") or {}
    what = execution.get("headline")
    # The first line says what the figures are from: real training or a simulation (report.json `execution`).
    lead = "Simulated — " if execution.get("simulated") else f"{what[0].upper()}{what[1:]} — " if what else ""
    add(f"# {lead}GRPO run report: {run.get('name', '?')}\n")
    add(
        f"Run directory `{run.get('path', '?')}`; {doc['training_steps']} training step(s); "
        f"warm-up {doc['warmup_steps']} step(s). Generated from `metrics.jsonl` by `launcher report`.\n"
    )
    if execution.get("simulated"):  # first thing a reader sees: these figures are not from training
        headline = execution["headline"]
        add(f"> **{headline[0].upper()}{headline[1:]}.** {execution['note'][0].upper()}{execution['note'][1:]}\n")

    # Config -------------------------------------------------------------------------------
    add("## Config\n")
    cfg = doc.get("config")
    if cfg:
        flat = flatten(cfg)
        if isinstance(flat.get("reward.function.source"), str):  # a file's content, not a table cell
            flat["reward.function.source"] = describe_source(flat["reward.function.source"])
        shown = [f for f in CONFIG_FIELDS if f in flat]
        add("| field | value |\n|---|---|")
        for f in shown:
            # a built-in model says what it is (launcher.spec.contract): a test model must not pass for a real one
            known = builtin_model(str(flat[f])) if f == "model.path" else None
            what = f" ({known.description})" if known else ""
            add(f"| `{f}` | `{flat[f]}`{what} |")
        add("")
        rest = [k for k in flat if k not in shown]
        if rest:
            add("<details><summary>Full resolved config (spec.yaml)</summary>\n")
            add("| field | value |\n|---|---|")
            out.extend(f"| `{k}` | `{flat[k]}` |" for k in rest)
            add("\n</details>\n")
    else:
        add(
            "No `spec.yaml` in the run directory: the config is unknown, and recommendations that need a "
            "current value propose `null`.\n"
        )

    # Windows and definitions --------------------------------------------------------------
    add("## Windows and definitions\n")
    add(
        f"- **all**: every training step, {_window_line(doc, 'all')}. A training step is a `metrics.jsonl` row "
        "carrying training metrics; verl's step-0 validation row (only `val-*` keys) is not one."
    )
    add(
        f"- **steady**: all but the first {doc['warmup_steps']} training step(s), {_window_line(doc, 'steady')}. "
        "Warm-up (model loading, engine initialisation, compilation) inflates the first step's time."
    )
    add(
        "- Statistics per window use finite values only (JSON `null`/NaN and missing keys are left out); "
        "`n` counts the values used; `std` is the sample standard deviation (ddof = 1), n/a when n < 2.\n"
    )
    add("| figure | definition |\n|---|---|")
    out.extend(f"| `{key}` | {text} |" for key, text in DEFINITIONS.items())
    add("")

    # Headline -----------------------------------------------------------------------------
    add("## Headline figures\n")
    steady, all_ = doc["windows"]["steady"], doc["windows"]["all"]
    add("| figure | steady mean ± std | steady min – max | n | all mean ± std | n |\n|---|---|---|---|---|---|")
    for key, label in HEADLINE:
        s, a = stat_of(steady, key), stat_of(all_, key)
        add(f"| {label} (`{key}`) | {_pm(s)} | {_range(s)} | {s.get('n', 0)} | {_pm(a)} | {a.get('n', 0)} |")
    add("")
    tr = doc.get("trend") or {}
    if tr.get("slope_per_step") is not None:
        lo, hi = tr["ci95"]
        add(f"**Score trend: {tr['direction']}**, {tr['slope_per_step']:+.4g} per step over {tr['n']} steps (95% "
            f"interval [{lo:+.4g}, {hi:+.4g}]; least squares on every training step; `{tr['key']}`).\n")
    elif tr:
        add(f"Score trend: {tr.get('note')}.\n")

    # Throughput ---------------------------------------------------------------------------
    tp = doc.get("throughput") or {}
    add("## Throughput\n")
    per, tot = stat_of(steady, "perf/throughput"), stat_of(steady, "throughput_total")
    add(f"- **Per GPU** (`perf/throughput`, verl's own figure): steady mean {num(per.get('mean'))} tokens/s/GPU.")
    add(
        "- **Total** (`perf/total_num_tokens / timing_s/step`, whole job): "
        f"steady mean {num(tot.get('mean'))} tokens/s."
    )
    implied, expected = tp.get("gpus_implied"), tp.get("gpus_expected")
    add(f"- GPU count implied by total / per-GPU: {num(implied)}"
        + (f"; expected from the spec (nodes × GPUs per node): {expected}." if expected is not None
           else "; the spec's GPU count is unknown."))
    if tp.get("note"):
        add(f"- Note: {tp['note']}.")
    add("")

    # Correlation --------------------------------------------------------------------------
    add("## Does reward move with truncation?\n")
    add(
        "Pearson r of `critic/score/mean` with `response_length/clip_ratio` over steps where both are finite; "
        "95% interval from 2000 paired bootstrap resamples (seed 0). A negative r means steps that truncated "
        "more responses scored lower.\n"
    )
    add("| window | r | n | 95% CI | note |\n|---|---|---|---|---|")
    for name in ("all", "steady"):
        for p in (doc.get("pearson", {}).get(name) or {}).values():
            ci = p.get("ci95")
            ci_s = f"[{num(ci[0])}, {num(ci[1])}]" if ci else "n/a"
            add(f"| {name} | {num(p.get('r'))} | {p.get('n', 0)} | {ci_s} | {p.get('note') or ''} |")
    add("")

    # Zero-signal --------------------------------------------------------------------------
    add("## Zero-signal steps\n")
    zs, frac = doc.get("zero_signal_steps") or [], doc.get("zero_signal_fraction")
    add(
        "A step whose `actor/grad_norm` is exactly 0 taught nothing: every group's rollouts got the same reward, "
        "so every GRPO advantage (score − group mean) was 0. A near-zero `pg_loss` alone is not this: "
        "positive and negative advantages can cancel in the loss and still give a gradient.\n"
    )
    if frac is None:
        add("Not computed: no training step logged `actor/grad_norm`.\n")
    elif zs:
        add(
            f"**{len(zs)} zero-signal step(s)** ({frac:.1%} of the steps that logged a grad norm): "
            f"{', '.join(map(str, zs))}.\n"
        )
    else:
        add("None: every step that logged a grad norm had a non-zero one.\n")

    # Recommendations ----------------------------------------------------------------------
    add("## Recommendations\n")
    recs = doc.get("recommendations") or []
    if not recs:
        add("None triggered (see the thresholds in `launcher.report.diagnose`).\n")
    for rec in recs:
        add(f"### `{rec['id']}` ({rec.get('severity', '')})\n")
        add(f"- Evidence: {rec['evidence']}.")
        change = ", ".join(f"`{k}: {_code(v)}`" for k, v in rec.get("change", {}).items()) or "none"
        add(f"- Change: {change}")
        if rec.get("rationale"):
            add(f"- Why: {rec['rationale']}")
        add("")

    # Plots --------------------------------------------------------------------------------
    if plots:
        add("## Plots\n")
        out.extend(f"![{name}]({file})\n" for name, file in plots.items())

    # Extra sections -----------------------------------------------------------------------
    for section in sections:
        add(f"## {section.title}\n")
        add(section.markdown.rstrip() + "\n")
        for img in getattr(section, "images", ()) or ():
            add(f"![{section.key}]({img})\n")

    # Notes --------------------------------------------------------------------------------
    notes = doc.get("notes") or []
    add("## What could not be computed\n")
    if notes:
        out.extend(f"- {n}" for n in notes)
        add("")
    else:
        add("Everything above was computed from the run's metrics.\n")

    # All metrics --------------------------------------------------------------------------
    keys = sorted(set((all_.get("metrics") or {}).keys()))
    if keys:
        add("## All metrics\n")
        add("<details><summary>Every numeric verl key, per window</summary>\n")
        add("| key | steady mean | std | min | max | n | all mean | std | min | max | n |")
        add("|---|---|---|---|---|---|---|---|---|---|---|")
        for k in keys:
            s, a = stat_of(steady, k), stat_of(all_, k)
            cells = [num(s.get(f)) for f in ("mean", "std", "min", "max")] + [str(s.get("n", 0))]
            cells += [num(a.get(f)) for f in ("mean", "std", "min", "max")] + [str(a.get("n", 0))]
            add(f"| `{k}` | " + " | ".join(cells) + " |")
        add("\n</details>\n")
    return "\n".join(out).rstrip() + "\n"
