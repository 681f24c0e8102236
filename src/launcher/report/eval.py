"""The report's GSM8K evaluation section: base vs trained accuracy and a 95% CI for the difference.

Input is `eval.json` (`launcher.run.eval`), found in the report's run directory (the eval job's
own run dir, `runs/<name>-eval-<hash>/`) or passed explicitly (`launcher report RUN --eval EVAL_RUN`,
whose section `eval_section(path)` builds). Registered in `SECTION_PROVIDERS` on import, so `report`
and `compare` show it for every run directory that holds (or whose logs yield) an eval.json.

Interval for trained − base accuracy:
- **paired bootstrap** when both models' per-question scores are present and their question lists
  match (`ids_sha256`): resample the questions with replacement (B = 10 000, numpy
  `default_rng(seed)`, seed 0 by default, so a report is reproducible) and take the 2.5th and 97.5th
  percentiles of the mean per-question difference. Pairing matters: both models answer the same
  questions, and the per-question scores are strongly correlated, so the paired interval is much
  narrower than one that treats the two accuracies as independent.
- otherwise **Newcombe's hybrid score interval** (method 10 of Newcombe 1998) for the difference of two
  independent proportions, from the two accuracies and question counts: Wilson intervals (l, u)
  for each proportion combined as d − sqrt((p2−l2)² + (u1−p1)²), d + sqrt((u2−p2)² + (p1−l1)²).
  It ignores the pairing and is therefore conservative (wider) here.

The section always carries the caveat of notes/verl.md §11: verl's GSM8K reward is rule-based
(strict: the last `#### N` within the final 300 characters), so a gain can be partly learning the
answer *format*. When the dump was re-scored with verl's flexible extractor, both strict and
flexible accuracies are shown; a strict gain much larger than the flexible gain points at format.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.run.eval import EVAL_JSON, HEADLINE_KEY, load_eval_json
from launcher.report.build import SECTION_PROVIDERS, Section

Z95 = 1.959963984540054  # standard normal 0.975 quantile
BOOTSTRAP_B = 10_000
DEFAULT_SEED = 0

FORMAT_CAVEAT = (
    "**Caveat: format learning.** verl's GSM8K reward is rule-based (`verl/utils/reward_score/gsm8k.py`, strict "
    "mode): a response scores 1 only if the *last* `#### <number>` within its final 300 characters equals the "
    "answer. `#### 72.`, `#### $72`, `72.0` or an answer followed by 300 more characters all score 0. A gain after "
    "a short GRPO run can therefore be partly the model learning to end with `#### N`, not better arithmetic. "
    "Compare the strict and flexible (last number in the response) accuracies in the table when present."
)


# --------------------------------------------------------------------------------------------------
# Intervals


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (successes may be a rounded float count)."""
    if n <= 0:
        raise ValueError("n must be positive")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(p1: float, n1: int, p2: float, n2: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p2 − p1 (independent samples; method 10, Newcombe 1998)."""
    l1, u1 = wilson_interval(p1 * n1, n1, z)
    l2, u2 = wilson_interval(p2 * n2, n2, z)
    d = p2 - p1
    return d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


def paired_bootstrap_interval(base: Sequence[float], trained: Sequence[float], *, b: int = BOOTSTRAP_B,
                              seed: int = DEFAULT_SEED, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of mean(trained − base) over questions resampled with replacement."""
    d = np.asarray(trained, dtype=float) - np.asarray(base, dtype=float)
    n = d.size
    if n == 0 or len(base) != len(trained):
        raise ValueError("paired scores must be two non-empty lists of equal length")
    rng = np.random.default_rng(seed)
    means = np.empty(b)
    chunk = max(1, 2_000_000 // n)  # bounded memory: at most ~2M indices at a time
    for start in range(0, b, chunk):
        stop = min(b, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = d[idx].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


# --------------------------------------------------------------------------------------------------
# eval.json → section


def _paired(doc: dict, kind: str) -> tuple[list, list] | None:
    qb, qc = (doc.get(k, {}).get("questions") for k in ("base", "checkpoint"))
    if not (isinstance(qb, dict) and isinstance(qc, dict)):
        return None
    if qb.get("ids_sha256") != qc.get("ids_sha256") or kind not in qb or kind not in qc:
        return None
    if len(qb[kind]) != len(qc[kind]) or not qb[kind]:
        return None
    return qb[kind], qc[kind]


def summarize(doc: dict, *, seed: int = DEFAULT_SEED) -> dict:
    """The section's data: per model accuracy and n, the difference, its 95% CI and how it was computed."""
    out: dict[str, Any] = {"headline_key": doc.get("headline_key", HEADLINE_KEY), "models": {}, "notes": []}
    key = out["headline_key"]
    for label in ("base", "checkpoint"):
        m = doc.get(label)
        if not m:
            continue
        q = m.get("questions") or {}
        entry = {"model": m.get("model"), "step": m.get("step"), "status": m.get("status"),
                 "accuracy": (m.get("metrics") or {}).get(key), "n": q.get("n")}
        for kind in ("strict", "flexible"):
            if q.get(kind):
                entry[f"{kind}_accuracy"] = float(np.mean(q[kind]))
        if entry["accuracy"] is None and "strict_accuracy" in entry:
            entry["accuracy"] = entry["strict_accuracy"]
            out["notes"].append(f"{label}: no {key} line in the log; accuracy from the per-question dump")
        out["models"][label] = entry
    base, ckpt = out["models"].get("base"), out["models"].get("checkpoint")
    if not (base and ckpt) or base["accuracy"] is None or ckpt["accuracy"] is None:
        out["notes"].append("the difference needs both a base and a checkpoint accuracy in eval.json")
        return out
    diff: dict[str, Any] = {"estimate": ckpt["accuracy"] - base["accuracy"], "level": 0.95}
    pair = _paired(doc, "strict")
    if pair is not None:
        diff["ci"] = paired_bootstrap_interval(*pair, seed=seed)
        diff["method"] = f"paired bootstrap over {len(pair[0])} questions ({BOOTSTRAP_B} resamples, seed {seed})"
        diff["estimate"] = float(np.mean(pair[1]) - np.mean(pair[0]))
        flex = _paired(doc, "flexible")
        if flex is not None:
            diff["flexible"] = {"estimate": float(np.mean(flex[1]) - np.mean(flex[0])),
                                "ci": paired_bootstrap_interval(*flex, seed=seed)}
    elif base["n"] and ckpt["n"]:
        diff["ci"] = newcombe_interval(base["accuracy"], base["n"], ckpt["accuracy"], ckpt["n"])
        diff["method"] = ("Newcombe hybrid score interval (independent proportions; per-question results not "
                          "paired, so conservative)")
    else:
        diff["ci"] = None
        diff["method"] = None
        out["notes"].append("no question count in eval.json (no per-question dump): no confidence interval")
    out["difference"] = diff
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f} pp"


def render_markdown(summary: dict, source: str) -> str:
    """The section body."""
    lines = [f"From `{source}` (metric `{summary['headline_key']}`, greedy decoding).", ""]
    lines += ["| model | path | accuracy (strict) | flexible | questions | verl status |",
              "|---|---|---|---|---|---|"]
    for label, m in summary["models"].items():
        name = label if m.get("step") is None else f"{label} (step {m['step']})"
        lines.append(f"| {name} | `{m.get('model')}` | {_pct(m.get('accuracy'))} | {_pct(m.get('flexible_accuracy'))} "
                     f"| {m.get('n') if m.get('n') is not None else 'n/a'} "
                     f"| {m.get('status') if m.get('status') is not None else 'n/a'} |")
    diff = summary.get("difference")
    if diff:
        lines.append("")
        ci = diff.get("ci")
        text = f"**Trained − base: {_pp(diff['estimate'])}**"
        if ci:
            text += f", 95% CI [{_pp(ci[0])}, {_pp(ci[1])}] ({diff['method']})."
            if ci[0] > 0:
                text += " The interval excludes 0: the checkpoint is better on this test set."
            elif ci[1] < 0:
                text += " The interval excludes 0: the checkpoint is worse on this test set."
            else:
                text += " The interval includes 0: no detectable difference at this sample size."
        lines.append(text)
        flex = diff.get("flexible")
        if flex:
            lines.append("")
            lines.append(f"Flexible scoring (last number in the response): {_pp(flex['estimate'])}, 95% CI "
                         f"[{_pp(flex['ci'][0])}, {_pp(flex['ci'][1])}]. A strict gain well above the flexible "
                         "gain is answer-format learning rather than more correct answers.")
    for note in summary["notes"]:
        lines.append("")
        lines.append(f"_Note: {note}_")
    lines += ["", FORMAT_CAVEAT]
    return "\n".join(lines) + "\n"


def eval_section(path: str | Path, *, seed: int = DEFAULT_SEED) -> Section | None:
    """The section for an eval run dir or eval.json file; None when there is nothing to show."""
    doc = load_eval_json(Path(path))
    if not doc or not any(k in doc for k in ("base", "checkpoint")):
        return None
    summary = summarize(doc, seed=seed)
    source = Path(path) if Path(path).is_file() else Path(path) / EVAL_JSON
    return Section(key="evaluation", title="GSM8K evaluation: base vs trained", markdown=render_markdown(summary, str(source)),
                   data=summary)


def provider(run, doc: dict) -> Section | None:
    """SECTION_PROVIDERS entry: the run directory's own eval.json (an eval job's run dir)."""
    return eval_section(run.path)


if provider not in SECTION_PROVIDERS:
    SECTION_PROVIDERS.append(provider)
