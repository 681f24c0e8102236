"""PNG plots for one run and for a comparison (matplotlib, Agg backend: no display needed).

Each plot is skipped, with a note, when the run lacks its metric, so a partial run still gets the
plots it can have. Warm-up steps are shaded so the reader sees which steps the steady window drops.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic rendering
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from launcher.report.load import Run, spec_get  # noqa: E402
from launcher.report.stats import (  # noqa: E402
    CLIP_KEY,
    SCORE_KEY,
    STEP_TIME_KEY,
    THROUGHPUT_PER_GPU_KEY,
    column,
    throughput_total,
)

DPI = 110
SIZE = (8.0, 4.2)
BLUE, ORANGE, GREEN, RED, GREY, PURPLE = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f", "#9467bd"


def _finite_any(values: np.ndarray) -> bool:
    return bool(np.isfinite(values).any())


def _style(ax, ylabel: str, steps: np.ndarray) -> None:
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if steps.size == 1:  # a single point would otherwise sit on an axis edge
        ax.set_xlim(steps[0] - 1, steps[0] + 1)


def _shade_warmup(ax, steps: np.ndarray, warmup: int) -> None:
    if warmup <= 0 or steps.size == 0:
        return
    last = steps[min(warmup, steps.size) - 1]
    label = f"warm-up ({warmup} step{'s' if warmup != 1 else ''})"
    ax.axvspan(steps[0] - 0.5, last + 0.5, color=GREY, alpha=0.15, lw=0, label=label)


def _line(ax, steps, values, label, color, marker="o"):
    # Few points: show markers so single steps and NaN-isolated points stay visible.
    ms = 4 if steps.size <= 60 else 0
    ax.plot(steps, values, marker=marker, ms=ms, lw=1.5, color=color, label=label)


def _legend_above(ax) -> None:
    """Legend in a row above the axes: a min-max band fills the plot, so no inside spot is free."""
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles,
        labels,
        loc="lower left",
        bbox_to_anchor=(0, 1.01, 1, 0.1),
        ncol=min(len(labels), 4),
        fontsize=8,
        frameon=False,
        mode="expand",
    )


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _rolling(values: np.ndarray, width: int) -> np.ndarray:
    """Trailing mean over the last `width` finite values (NaN-aware)."""
    out = np.full(values.shape, np.nan)
    for i in range(values.size):
        win = values[max(0, i - width + 1) : i + 1]
        win = win[np.isfinite(win)]
        if win.size:
            out[i] = win.mean()
    return out


def _single(run_rows, steps, key, title, ylabel, color, warmup, path, extra=None) -> Path:
    fig, ax = plt.subplots(figsize=SIZE)
    values = column(run_rows, key)
    _shade_warmup(ax, steps, warmup)
    _line(ax, steps, values, key, color)
    if extra:
        extra(ax, values)
    ax.set_title(title)
    _style(ax, ylabel, steps)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def write_run_plots(run: Run, doc: dict, out_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """Write the run's PNGs into `out_dir`; returns {name: path} and notes on skipped plots."""
    rows = run.training_rows
    warmup = int(doc.get("warmup_steps", 0))
    steps = np.array([int(r["step"]) for r in rows], dtype=float)
    written: dict[str, Path] = {}
    skipped: list[str] = []
    title = run.name

    def has(key: str) -> bool:
        return _finite_any(column(rows, key))

    # Score, with a rolling mean for the trend (single steps are noisy: 8 prompts x n samples)
    # and validation accuracy points when the run logged any.
    def score_extra(ax, values):
        if values.size >= 8:
            ax.plot(steps, _rolling(values, 5), color=ORANGE, lw=2, alpha=0.8, label="rolling mean (5 steps)")
        for key, pts in (doc.get("validation") or {}).items():
            if key.startswith("val-core/") and pts:
                ax.plot([p["step"] for p in pts], [p["value"] for p in pts], "*", ms=11, color=GREEN,
                        label=f"{key} (validation)")
        if np.nanmin(values) >= 0 and np.nanmax(values) <= 1:  # a 0/1 reward: show the full range
            ax.set_ylim(-0.05, 1.05)

    zero = set(doc.get("zero_signal_steps") or [])

    def grad_extra(ax, values):
        zs = [s for s in steps if int(s) in zero]
        if zs:
            ax.plot(zs, [0.0] * len(zs), "X", ms=9, color=RED, label=f"zero-signal step ({len(zs)})")
        ax.set_ylim(bottom=min(0.0, np.nanmin(values)) - 0.02 * (np.nanmax(values) or 1))

    # (metric, file name, title, y label, colour, extra drawing): one curve per step each
    for key, name, what, ylabel, color, extra in (
            (SCORE_KEY, "score", "training reward (score) per step", "mean score", BLUE, score_extra),
            ("actor/entropy", "entropy", "policy entropy over response tokens", "entropy (nats/token)", GREEN, None),
            ("actor/pg_loss", "pg_loss", "policy-gradient loss", "pg loss", ORANGE,
             lambda ax, v: ax.axhline(0, color=GREY, lw=0.8)),
            ("actor/grad_norm", "grad_norm", "gradient norm", "grad norm", PURPLE, grad_extra)):
        if has(key):
            written[name] = _single(rows, steps, key, f"{title}: {what}", ylabel, color, warmup,
                                    out_dir / f"{name}.png", extra)
        else:
            skipped.append(f"{name}.png skipped: no {key}")

    # Response length (with its min-max band and the configured limit) above the clip ratio.
    if has("response_length/mean") or has(CLIP_KEY):
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8.0, 6.0), sharex=True)
        mean = column(rows, "response_length/mean")
        lo, hi = column(rows, "response_length/min"), column(rows, "response_length/max")
        _shade_warmup(ax1, steps, warmup)
        if _finite_any(lo) and _finite_any(hi):
            ax1.fill_between(steps, lo, hi, color=BLUE, alpha=0.15, label="min-max")
        _line(ax1, steps, mean, "response_length/mean", BLUE)
        limit = spec_get(run.spec, "data.max_response_length")
        if isinstance(limit, (int, float)):
            ax1.axhline(limit, color=RED, ls="--", lw=1, label=f"max_response_length = {limit}")
        ax1.set_ylabel("tokens")
        ax1.set_ylim(bottom=0)
        fig.suptitle(f"{title}: response length and truncation")
        ax1.grid(True, alpha=0.3)
        _legend_above(ax1)
        clip = column(rows, CLIP_KEY)
        _shade_warmup(ax2, steps, warmup)
        _line(ax2, steps, clip, CLIP_KEY, ORANGE)
        ax2.axhline(0.10, color=GREY, ls=":", lw=1, label="0.10 (recommendation threshold)")
        ax2.set_ylim(-0.02, max(0.3, float(np.nanmax(clip)) * 1.1) if _finite_any(clip) else 1.0)
        _style(ax2, "clip ratio (truncated share)", steps)
        _legend_above(ax2)
        written["response_length"] = _save(fig, out_dir / "response_length.png")
    else:
        skipped.append("response_length.png skipped: no response_length/mean or clip_ratio")

    # Step time above throughput (whole-job total and verl's per-GPU figure, each labelled).
    if has(STEP_TIME_KEY) or has(THROUGHPUT_PER_GPU_KEY):
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8.0, 6.0), sharex=True)
        _shade_warmup(ax1, steps, warmup)
        _line(ax1, steps, column(rows, STEP_TIME_KEY), STEP_TIME_KEY, BLUE)
        ax1.set_ylabel("seconds")
        ax1.set_ylim(bottom=0)
        fig.suptitle(f"{title}: step time and throughput")
        ax1.grid(True, alpha=0.3)
        _legend_above(ax1)
        _shade_warmup(ax2, steps, warmup)
        total = throughput_total(rows)
        if _finite_any(total):
            _line(ax2, steps, total, "total: total_num_tokens / step time", GREEN)
        _line(ax2, steps, column(rows, THROUGHPUT_PER_GPU_KEY), "per GPU: perf/throughput", ORANGE, marker="s")
        ax2.set_ylim(bottom=0)
        _style(ax2, "tokens / s", steps)
        _legend_above(ax2)
        written["throughput"] = _save(fig, out_dir / "throughput.png")
    else:
        skipped.append("throughput.png skipped: no timing_s/step or perf/throughput")

    # Score against clip ratio: does reward move with truncation?
    score, clip = column(rows, SCORE_KEY), column(rows, CLIP_KEY)
    ok = np.isfinite(score) & np.isfinite(clip)
    if ok.any():
        fig, ax = plt.subplots(figsize=(6.5, 5.0))
        is_warm = np.arange(len(rows)) < warmup
        sc = ax.scatter(
            clip[ok & ~is_warm],
            score[ok & ~is_warm],
            c=steps[ok & ~is_warm],
            cmap="viridis",
            s=40,
            edgecolor="k",
            lw=0.4,
            label="steady steps",
        )
        if (ok & is_warm).any():
            ax.scatter(
                clip[ok & is_warm], score[ok & is_warm], facecolor="none", edgecolor=GREY, s=40, label="warm-up steps"
            )
        if (ok & ~is_warm).any():
            fig.colorbar(sc, ax=ax, label="training step")
        x, y = clip[ok & ~is_warm], score[ok & ~is_warm]
        if x.size >= 3 and np.ptp(x) > 0:
            slope, icpt = np.polyfit(x, y, 1)
            xx = np.linspace(x.min(), x.max(), 2)
            ax.plot(xx, slope * xx + icpt, color=RED, lw=1, label="least-squares fit (steady)")
        p = (doc.get("pearson") or {}).get("steady", {}).get(f"{SCORE_KEY}~{CLIP_KEY}", {})
        if p.get("r") is not None:
            ci = p.get("ci95")
            txt = f"steady r = {p['r']:.2f}, n = {p['n']}" + (f"\n95% CI [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        else:
            txt = f"steady r not computed (n = {p.get('n', 0)})"
        ax.text(
            0.02,
            0.02,
            txt,
            transform=ax.transAxes,
            fontsize=9,
            va="bottom",
            bbox=dict(boxstyle="round", fc="white", ec=GREY, alpha=0.9),
        )
        ax.set_xlabel(f"{CLIP_KEY} (truncated share)")
        ax.set_ylabel(SCORE_KEY)
        ax.set_title(f"{title}: reward vs truncation")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        written["score_vs_clip"] = _save(fig, out_dir / "score_vs_clip.png")
    else:
        skipped.append("score_vs_clip.png skipped: no step has both score and clip ratio")
    return written, skipped


COMPARE_PANELS = [
    (SCORE_KEY, "mean score"),
    ("actor/entropy", "entropy"),
    ("actor/grad_norm", "grad norm"),
    ("response_length/mean", "response length (tokens)"),
    (CLIP_KEY, "clip ratio"),
    (STEP_TIME_KEY, "step time (s)"),
]


def write_compare_plots(runs: Sequence[Run], warmups: Sequence[int], out_dir: Path) -> dict[str, Path]:
    """One PNG of overlaid per-step curves (one colour per run) and one overlaid score~clip scatter."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(3, 2, figsize=(12.0, 10.0), sharex=True)
    for ax, (key, label) in zip(axes.flat, COMPARE_PANELS):
        for i, run in enumerate(runs):
            rows = run.training_rows
            steps = np.array([int(r["step"]) for r in rows], dtype=float)
            values = column(rows, key)
            if _finite_any(values):
                _line(ax, steps, values, run.name, colors[i % len(colors)])
        ax.set_title(key, fontsize=10)
        _style(ax, label, np.array([0.0, 1.0]))
        if ax not in axes[-1]:  # shared x: one axis label per column, at the bottom
            ax.set_xlabel("")
        if not ax.lines:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color=GREY)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if not handles:
        for ax in axes.flat:
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                break
    fig.legend(
        handles,
        labels,
        loc="upper center",
        ncol=min(len(runs), 4),
        fontsize=10,
        frameon=False,
        title="per-step metrics, overlaid",
        title_fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    out = {"compare_metrics": out_dir / "compare_metrics.png"}
    fig.savefig(out["compare_metrics"], dpi=DPI)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 5.0))
    for i, (run, warm) in enumerate(zip(runs, warmups)):
        rows = run.training_rows[warm:]
        x, y = column(rows, CLIP_KEY), column(rows, SCORE_KEY)
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.any():
            ax.scatter(
                x[ok], y[ok], s=36, color=colors[i % len(colors)], edgecolor="k", lw=0.4, alpha=0.8, label=run.name
            )
    if not ax.collections:
        ax.text(
            0.5,
            0.5,
            "no step has both score and clip ratio",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color=GREY,
        )
    ax.set_xlabel(f"{CLIP_KEY} (truncated share)")
    ax.set_ylabel(SCORE_KEY)
    ax.set_title("reward vs truncation (steady steps)")
    ax.grid(True, alpha=0.3)
    if ax.collections:
        ax.legend(fontsize=8)
    out["compare_score_vs_clip"] = _save(fig, out_dir / "compare_score_vs_clip.png")
    return out
