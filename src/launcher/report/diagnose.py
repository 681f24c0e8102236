"""Zero-signal steps and recommendations: what the metrics say to change next.

Every recommendation carries an `id`, a `severity`, the `evidence` (numbers from this run) and a
`change`: dotted config fields of `spec.yaml` with the proposed value (null when the current value is
unknown because the run has no spec). Thresholds are module constants so tests and docs can cite
them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from launcher.report.load import spec_get
from launcher.report.stats import CLIP_KEY, STEP_TIME_KEY, column

GRAD_NORM_KEY = "actor/grad_norm"
ENTROPY_KEY = "actor/entropy"
RESPONSE_MAX_KEY = "response_length/max"

# raise_max_response_length: truncating 1 response in 10 or more in steady state.
CLIP_RATIO_THRESHOLD = 0.10
CLIP_RATIO_HIGH = 0.25
# raise_rollout_n: any zero-signal step; "high" severity when rollout.n is this small or smaller,
# because with n samples per prompt a group is all-equal with probability p^n + (1-p)^n.
ROLLOUT_N_SMALL = 2
# stabilize_grad_norm: over steady non-zero grad norms, a spike this many times the median, or a
# coefficient of variation above this.
GRAD_SPIKE_RATIO = 10.0
GRAD_CV_THRESHOLD = 1.0
GRAD_MIN_STEPS = 3
# entropy_collapse: the last third of the steady window below this many nats, or below this
# fraction of the first third (with at least ENTROPY_MIN_STEPS steady steps to split).
ENTROPY_FLOOR = 0.05
ENTROPY_DROP_FRACTION = 0.25
ENTROPY_MIN_STEPS = 6
PROPOSED_ENTROPY_COEFF = 0.001
# long_warmup: the first training step takes this many times the median of the others, and the
# excess is at least this share of the run's total step time.
WARMUP_RATIO = 3.0
WARMUP_SHARE = 0.10
# Note (not a config change) when the first steady step is still this slow relative to the median.
SLOW_STEADY_START_RATIO = 2.0


def zero_signal_steps(training_rows: Sequence[dict[str, float]]) -> tuple[list[int], float | None, int]:
    """Steps whose `actor/grad_norm` is exactly 0, their fraction, and how many steps had a grad norm.

    A grad norm of exactly 0 means every group's rollouts got the same reward, so every GRPO
    advantage (score - group mean) was 0 and the update changed nothing. A near-zero `pg_loss` alone
    is not evidence: positive and negative advantages cancel in the loss while still giving a
    gradient. The fraction is over steps that logged a grad norm (None when none did).
    """
    steps = [int(r["step"]) for r in training_rows if r.get(GRAD_NORM_KEY) == 0.0]
    known = sum(1 for r in training_rows if math.isfinite(r.get(GRAD_NORM_KEY, math.nan)))
    return steps, (len(steps) / known if known else None), known


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}g}"


def _rec(rec_id: str, severity: str, evidence: str, change: dict[str, Any], rationale: str) -> dict:
    return {"id": rec_id, "severity": severity, "evidence": evidence, "change": change, "rationale": rationale}


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def recommend(
    training_rows: Sequence[dict[str, float]],
    steady_rows: Sequence[dict[str, float]],
    zero_steps: Sequence[int],
    spec: dict[str, Any] | None,
) -> tuple[list[dict], list[str]]:
    """Recommendations (ordered by severity, then id) and notes on checks that could not run."""
    recs: list[dict] = []
    notes: list[str] = []
    if not training_rows:
        return recs, ["recommendations skipped: no training steps"]

    # raise_max_response_length -------------------------------------------------------------
    clip = _finite(column(steady_rows, CLIP_KEY))
    if clip.size == 0:
        notes.append(f"truncation check skipped: no steady-window {CLIP_KEY}")
    elif (clip_mean := float(clip.mean())) >= CLIP_RATIO_THRESHOLD:
        current = spec_get(spec, "data.max_response_length")
        source = "spec.yaml"
        if not isinstance(current, (int, float)):
            # A truncated response is exactly max_response_length long, so the largest observed
            # response length is the limit whenever anything was truncated.
            observed = _finite(column(training_rows, RESPONSE_MAX_KEY))
            current = int(observed.max()) if observed.size else None
            source = f"largest {RESPONSE_MAX_KEY}"
        proposed = int(current) * 2 if current else None
        evidence = (
            f"steady mean {CLIP_KEY} = {clip_mean:.3f} over {clip.size} step(s) "
            f"(threshold {CLIP_RATIO_THRESHOLD:.2f}): "
            f"{clip_mean:.0%} of responses hit the length limit"
            + (f" of {int(current)} tokens ({source})" if current else " (limit unknown)")
        )
        recs.append(
            _rec(
                "raise_max_response_length",
                "high" if clip_mean >= CLIP_RATIO_HIGH else "medium",
                evidence,
                {"data.max_response_length": proposed},
                "Truncated responses usually lose the final answer and score 0, so the reward partly measures "
                "length, not correctness. Doubling the limit costs generation time and memory; keep "
                "data.max_prompt_length + data.max_response_length within the model's context.",
            )
        )

    # raise_rollout_n -----------------------------------------------------------------------
    if zero_steps:
        n = spec_get(spec, "rollout.n")
        n_known = isinstance(n, int) and not isinstance(n, bool)
        # over the steps that logged a grad norm, as zero_signal_fraction is
        known = sum(1 for r in training_rows if math.isfinite(r.get(GRAD_NORM_KEY, math.nan)))
        frac = len(zero_steps) / max(known, 1)
        small = n_known and n <= ROLLOUT_N_SMALL
        evidence = (
            f"{len(zero_steps)} of {known} training step(s) ({frac:.0%}) had {GRAD_NORM_KEY} = 0 "
            f"(steps {', '.join(map(str, zero_steps[:20]))}{' ...' if len(zero_steps) > 20 else ''}); "
            + (f"rollout.n = {n}" if n_known else "rollout.n unknown (no spec.yaml)")
        )
        recs.append(
            _rec(
                "raise_rollout_n",
                "high" if small else "medium",
                evidence,
                {"rollout.n": 2 * n if n_known else None},
                "A step with grad norm 0 taught nothing: every group's samples got the same reward, so all "
                "GRPO advantages were 0. More samples per prompt make an all-equal group less likely "
                "(probability p^n + (1-p)^n for a prompt solved with probability p)"
                + (f"; with n = {n} this is the main lever." if small else "."),
            )
        )

    # stabilize_grad_norm -------------------------------------------------------------------
    grad = _finite(column(steady_rows, "actor/grad_norm"))
    grad = grad[grad > 0]  # zero-signal steps are reported above; they are not instability
    if grad.size >= GRAD_MIN_STEPS:
        median = float(np.median(grad))
        spike = float(grad.max() / median) if median > 0 else math.inf
        cv = float(np.std(grad, ddof=1) / np.mean(grad))
        if spike >= GRAD_SPIKE_RATIO or cv > GRAD_CV_THRESHOLD:
            lr = spec_get(spec, "actor.lr")
            lr_known = isinstance(lr, (int, float)) and not isinstance(lr, bool)
            recs.append(
                _rec(
                    "stabilize_grad_norm",
                    "medium",
                    f"steady non-zero {GRAD_NORM_KEY}: median {_fmt(median)}, max {_fmt(float(grad.max()))} "
                    f"({spike:.1f}x the median; threshold {GRAD_SPIKE_RATIO:g}x), coefficient of variation "
                    f"{cv:.2f} (threshold {GRAD_CV_THRESHOLD:g}) over {grad.size} step(s)",
                    {"actor.lr": lr / 2 if lr_known else None},
                    "Spiky gradient norms mean a few batches dominate the updates; gradient clipping caps "
                    "the step but not its direction. A smaller learning rate (or a larger "
                    "data.train_batch_size) makes updates steadier.",
                )
            )
    else:
        notes.append(f"grad-norm stability check skipped: {grad.size} steady step(s) with a non-zero {GRAD_NORM_KEY}")

    # entropy_collapse ----------------------------------------------------------------------
    ent = _finite(column(steady_rows, ENTROPY_KEY))
    if ent.size >= 1:
        third = max(ent.size // 3, 1)
        early, late = float(ent[:third].mean()), float(ent[-third:].mean())
        dropped = ent.size >= ENTROPY_MIN_STEPS and early > 0 and late < ENTROPY_DROP_FRACTION * early
        if late < ENTROPY_FLOOR or dropped:
            coeff = spec_get(spec, "algorithm.entropy_coeff")
            proposed = PROPOSED_ENTROPY_COEFF
            if isinstance(coeff, (int, float)) and not isinstance(coeff, bool) and coeff > 0:
                proposed = coeff * 2
            recs.append(
                _rec(
                    "entropy_collapse",
                    "medium",
                    f"{ENTROPY_KEY}: mean {late:.3g} over the last {third} steady step(s) vs {early:.3g} over the "
                    f"first {third} (floor {ENTROPY_FLOOR:g} nats; collapse when below {ENTROPY_DROP_FRACTION:.0%} "
                    "of the start)",
                    {"algorithm.entropy_coeff": proposed},
                    "The policy is becoming deterministic, so rollouts of a prompt agree and GRPO groups stop "
                    "carrying signal. A small entropy bonus (or a higher rollout.temperature) keeps exploring.",
                )
            )
    else:
        notes.append(f"entropy check skipped: no steady-window {ENTROPY_KEY}")

    # long_warmup ---------------------------------------------------------------------------
    times = column(training_rows, STEP_TIME_KEY)
    if times.size >= 2 and np.isfinite(times[0]) and _finite(times[1:]).size:
        first, rest = float(times[0]), _finite(times[1:])
        median = float(np.median(rest))
        total = first + float(rest.sum())
        excess = first - median
        if median > 0 and first >= WARMUP_RATIO * median and excess >= WARMUP_SHARE * total:
            current = spec_get(spec, "trainer.total_training_steps")
            steps_now = current if isinstance(current, int) and not isinstance(current, bool) else len(training_rows)
            # Steps needed so the warm-up excess is at most WARMUP_SHARE of the run's step time:
            # excess <= share * (first + (N-1) * median)  =>  N >= (excess/share - first)/median + 1
            needed = math.ceil((excess / WARMUP_SHARE - first) / median + 1)
            needed = int(math.ceil(needed / 5) * 5)
            recs.append(
                _rec(
                    "long_warmup",
                    "low",
                    f"first training step {first:.1f} s = {first / median:.1f}x the median {median:.1f} s of the "
                    f"rest; its excess {excess:.1f} s is {excess / total:.0%} of the run's {total:.0f} s of step time",
                    {"trainer.total_training_steps": max(needed, steps_now)},
                    "Model loading, engine start-up and compilation land in step 1. A run this short spends "
                    "a large share of its time there; more steps per run amortise it (and the steady window "
                    "already excludes it from the step-time figures).",
                )
            )
        if times.size >= 3 and len(steady_rows) >= 2:
            s_times = _finite(column(steady_rows, STEP_TIME_KEY))
            if s_times.size >= 2:
                s_med = float(np.median(s_times[1:]))
                if s_med > 0 and s_times[0] >= SLOW_STEADY_START_RATIO * s_med:
                    notes.append(
                        f"the first steady step ({int(steady_rows[0]['step'])}) took {s_times[0]:.1f} s, "
                        f"{s_times[0] / s_med:.1f}x the steady median; consider a larger --warmup-steps"
                    )

    order = {"high": 0, "medium": 1, "low": 2}
    recs.sort(key=lambda r: (order[r["severity"]], r["id"]))
    return recs, notes
