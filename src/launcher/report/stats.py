"""Window statistics, total throughput, the score trend and the score~clip-ratio correlation.

Conventions (they are part of the `report.json` contract):
- A window's statistics use only finite values: JSON null (NaN), missing keys and ±inf are left out,
  and `n` counts what was used.
- `std` is the sample standard deviation (ddof = 1); it is null when n < 2. Every figure is null when
  n = 0.
- The bootstrap is seeded, so the same metrics always give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SCORE_KEY = "critic/score/mean"
CLIP_KEY = "response_length/clip_ratio"
PEARSON_PAIR = f"{SCORE_KEY}~{CLIP_KEY}"
TOKENS_KEY = "perf/total_num_tokens"
STEP_TIME_KEY = "timing_s/step"
THROUGHPUT_PER_GPU_KEY = "perf/throughput"

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
# Below this many paired steps a correlation (and its interval) is too noisy to act on.
PEARSON_MIN_N = 10


@dataclass(frozen=True)
class Window:
    """A named slice of the training rows (`all` or `steady`)."""

    name: str
    rows: list[dict[str, float]]

    @property
    def steps(self) -> list[int]:
        """The step numbers in this window, in order."""
        return [int(r["step"]) for r in self.rows]


def make_windows(training_rows: list[dict[str, float]], warmup_steps: int) -> dict[str, Window]:
    """`all` = every training step; `steady` = all but the first `warmup_steps` of them.

    Warm-up is counted in training steps, not step numbers, so a run that resumed at step 26 drops
    its own first K steps. `steady` is empty when K >= the number of training steps.
    """
    return {
        "all": Window("all", list(training_rows)),
        "steady": Window("steady", list(training_rows[warmup_steps:])),
    }


def column(rows: Sequence[dict[str, float]], key: str) -> np.ndarray:
    """The values of `key` over `rows` as floats, NaN where the key is missing."""
    return np.array([r.get(key, np.nan) for r in rows], dtype=float)


def describe(values: np.ndarray | Sequence[float]) -> dict[str, float | int | None]:
    """mean, std (ddof=1), min, max and n over the finite values; null figures when undefined."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": float(np.mean(v)),
        "std": float(np.std(v, ddof=1)) if n >= 2 else None,
        "min": float(np.min(v)),
        "max": float(np.max(v)),
        "n": n,
    }


def metric_keys(rows: Sequence[dict[str, float]]) -> list[str]:
    """Every metric key that appears in `rows`, sorted (the `step` field is not a metric)."""
    return sorted({k for r in rows for k in r if k != "step"})


def throughput_total(rows: Sequence[dict[str, float]]) -> np.ndarray:
    """Whole-job tokens/s per step: `perf/total_num_tokens / timing_s/step` (NaN when undefined)."""
    tokens = column(rows, TOKENS_KEY)
    secs = column(rows, STEP_TIME_KEY)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = tokens / secs
    # A zero or negative step time is a logging artefact, not infinite throughput.
    out[~(secs > 0)] = np.nan
    return out


def window_stats(window: Window, keys: Sequence[str]) -> dict:
    """The JSON block for one window: step range, per-key statistics and total throughput."""
    steps = window.steps
    return {
        "first_step": steps[0] if steps else None,
        "last_step": steps[-1] if steps else None,
        "metrics": {k: describe(column(window.rows, k)) for k in keys},
        "throughput_total": describe(throughput_total(window.rows)),
    }


def implied_gpus(rows: Sequence[dict[str, float]]) -> float | None:
    """The GPU count implied by total vs per-GPU throughput: median of total / `perf/throughput`.

    verl defines `perf/throughput = total_num_tokens / (timing_s/step * n_gpus)`, so the ratio is
    n_gpus on every step; the median ignores a step whose timer and token count disagree.
    """
    per_gpu = column(rows, THROUGHPUT_PER_GPU_KEY)
    total = throughput_total(rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = total / per_gpu
    ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
    if ratio.size == 0:
        return None
    return float(np.median(ratio))


def _pearson_r(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r of two equal-length vectors; NaN when either is constant."""
    xd = x - x.mean()
    yd = y - y.mean()
    denom = np.sqrt((xd * xd).sum() * (yd * yd).sum())
    if denom == 0 or not np.isfinite(denom):
        return float("nan")
    return float(np.clip((xd * yd).sum() / denom, -1.0, 1.0))


def bootstrap_ci(
    x: np.ndarray, y: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of Pearson r over paired resamples of (x, y).

    Resamples in which one variable is constant have no r and are dropped; when more than half are
    dropped the interval says nothing and None is returned.
    """
    n = x.size
    if n < 3:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    xs, ys = x[idx], y[idx]
    xd = xs - xs.mean(axis=1, keepdims=True)
    yd = ys - ys.mean(axis=1, keepdims=True)
    num = (xd * yd).sum(axis=1)
    den = np.sqrt((xd * xd).sum(axis=1) * (yd * yd).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
    r = r[np.isfinite(r)]
    if r.size < resamples / 2:
        return None
    lo, hi = np.percentile(np.clip(r, -1.0, 1.0), [2.5, 97.5])
    return float(lo), float(hi)


def pearson(rows: Sequence[dict[str, float]], x_key: str = SCORE_KEY, y_key: str = CLIP_KEY) -> dict:
    """Pearson r of two metrics over the steps where both are finite, with n, a 95% bootstrap CI and
    a plain-language `note` when the figure cannot be trusted (or computed)."""
    x = column(rows, x_key)
    y = column(rows, y_key)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = int(x.size)
    out: dict = {"r": None, "n": n, "ci95": None, "note": None}
    if n < 3:
        out["note"] = f"not computed: {n} step(s) with both {x_key} and {y_key}; at least 3 are needed"
        return out
    r = _pearson_r(x, y)
    if not np.isfinite(r):
        const = x_key if np.ptp(x) == 0 else y_key
        out["note"] = f"not computed: {const} is constant over these {n} steps, so r is undefined"
        return out
    out["r"] = r
    ci = bootstrap_ci(x, y)
    out["ci95"] = list(ci) if ci else None
    notes = []
    if n < PEARSON_MIN_N:
        notes.append(f"n={n} is too small to conclude anything (want at least {PEARSON_MIN_N} steps)")
    if ci is None:
        notes.append("no bootstrap interval: most resamples had a constant variable")
    elif ci[0] <= 0 <= ci[1]:
        notes.append("the 95% interval includes 0: no evidence of a linear relation")
    out["note"] = "; ".join(notes) or None
    return out


def trend(rows: Sequence[dict[str, float]], key: str = SCORE_KEY) -> dict:
    """The least-squares slope of `key` per training step over the steps where it is finite, with its 95% interval
    (Student t on the slope's standard error, scipy.stats.linregress) and `direction`: "rising" or "falling" when
    the interval excludes 0, else "flat"; null figures and a `note` below 3 steps or for a constant metric."""
    from scipy import stats as st

    x, y = np.array([float(r["step"]) for r in rows]), column(rows, key)
    ok = np.isfinite(y)
    x, y = x[ok], y[ok]
    n = int(x.size)
    out: dict = {"key": key, "slope_per_step": None, "ci95": None, "n": n, "direction": None, "note": None}
    if n < 3 or np.ptp(x) == 0:
        out["note"] = f"not computed: {n} step(s) with {key}; at least 3 are needed"
        return out
    if np.ptp(y) == 0:
        out.update(slope_per_step=0.0, ci95=[0.0, 0.0], direction="flat", note=f"{key} is constant")
        return out
    fit = st.linregress(x, y)
    half = float(st.t.ppf(0.975, n - 2) * fit.stderr)
    lo, hi = fit.slope - half, fit.slope + half
    out.update(slope_per_step=float(fit.slope), ci95=[float(lo), float(hi)],
               direction="rising" if lo > 0 else "falling" if hi < 0 else "flat")
    return out
