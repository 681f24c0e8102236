"""Zero-signal steps and recommendations: each rule fires on its evidence and only on it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from launcher.report.build import analyze
from launcher.report.diagnose import CLIP_RATIO_THRESHOLD, WARMUP_SHARE
from launcher.report.load import Run


def make_run(rows: list[dict], spec: dict | None = None) -> Run:
    """A Run straight from rows (the loader is tested elsewhere)."""
    return Run(path=Path("/nonexistent"), name="t", rows=rows, spec=spec)


def base_rows(n: int = 10, **overrides) -> list[dict]:
    """Healthy steps: nothing should be recommended."""
    rows = []
    for s in range(1, n + 1):
        row = {
            "step": s,
            "critic/score/mean": 0.5 + 0.01 * s,
            "response_length/clip_ratio": 0.02,
            "response_length/max": 256.0,
            "actor/entropy": 0.40 - 0.002 * s,
            "actor/pg_loss": 0.001 * (-1) ** s,
            "actor/grad_norm": 0.5 + 0.02 * (s % 3),
            "timing_s/step": 20.0 + 0.1 * (s % 2),
        }
        for key, values in overrides.items():
            row[key.replace("__", "/")] = values[s - 1]
        rows.append(row)
    return rows


SPEC = {
    "data": {"max_response_length": 256},
    "rollout": {"n": 2},
    "actor": {"lr": 1e-6},
    "trainer": {"total_training_steps": 10},
}


def ids(doc: dict) -> list[str]:
    return [r["id"] for r in doc["recommendations"]]


def test_healthy_run_has_no_recommendation():
    doc = analyze(make_run(base_rows(), SPEC), 1)
    assert doc["recommendations"] == []
    assert doc["zero_signal_steps"] == [] and doc["zero_signal_fraction"] == 0.0


def test_zero_signal_is_grad_norm_exactly_zero_not_small_pg_loss():
    grad = [0.5, 0.0, 1e-12, 0.0, 0.4, 0.6, math.nan, 0.5, 0.5, 0.0]
    pg = [0.0, 0.0, 0.0, 0.0, 1e-9, 0.0, 0.0, 0.1, 0.1, 0.1]  # many near-zero losses with a gradient
    rows = base_rows(actor__grad_norm=grad, actor__pg_loss=pg)
    doc = analyze(make_run(rows, SPEC), 1)
    want = [s for s, g in zip(range(1, 11), grad) if g == 0.0]
    assert doc["zero_signal_steps"] == want == [2, 4, 10]
    finite = [g for g in grad if not math.isnan(g)]
    assert doc["zero_signal_fraction"] == pytest.approx(len(want) / len(finite))


def test_raise_rollout_n_strength_depends_on_n():
    rows = base_rows(actor__grad_norm=[0.5, 0.0] + [0.5] * 8)
    rec = next(r for r in analyze(make_run(rows, SPEC), 1)["recommendations"] if r["id"] == "raise_rollout_n")
    assert rec["severity"] == "high" and rec["change"] == {"rollout.n": 4}
    assert "1 of 10" in rec["evidence"] and "rollout.n = 2" in rec["evidence"]
    spec8 = {**SPEC, "rollout": {"n": 8}}
    rec = next(r for r in analyze(make_run(rows, spec8), 1)["recommendations"] if r["id"] == "raise_rollout_n")
    assert rec["severity"] == "medium" and rec["change"] == {"rollout.n": 16}
    rec = next(r for r in analyze(make_run(rows, None), 1)["recommendations"] if r["id"] == "raise_rollout_n")
    assert rec["change"] == {"rollout.n": None} and "unknown" in rec["evidence"]


@pytest.mark.parametrize("steady_clip, fires", [(CLIP_RATIO_THRESHOLD, True), (0.0999, False), (0.3, True)])
def test_raise_max_response_length_threshold_on_steady_mean(steady_clip, fires):
    # the warm-up step truncates everything: it must not count
    clip = [1.0] + [steady_clip] * 9
    doc = analyze(make_run(base_rows(response_length__clip_ratio=clip), SPEC), 1)
    assert ("raise_max_response_length" in ids(doc)) is fires
    if fires:
        rec = next(r for r in doc["recommendations"] if r["id"] == "raise_max_response_length")
        assert rec["change"] == {"data.max_response_length": 512}
        assert rec["severity"] == ("high" if steady_clip >= 0.25 else "medium")


def test_raise_max_response_length_without_spec_uses_observed_limit():
    doc = analyze(make_run(base_rows(response_length__clip_ratio=[0.2] * 10), None), 1)
    rec = next(r for r in doc["recommendations"] if r["id"] == "raise_max_response_length")
    assert rec["change"] == {"data.max_response_length": 512}  # 2 x largest response_length/max (256)


def test_stabilize_grad_norm_on_spike_only():
    spiky = [0.5, 0.4, 0.5, 6.0, 0.45, 0.5, 0.55, 0.5, 0.4, 0.5]
    doc = analyze(make_run(base_rows(actor__grad_norm=spiky), SPEC), 1)
    rec = next(r for r in doc["recommendations"] if r["id"] == "stabilize_grad_norm")
    assert rec["change"] == {"actor.lr": pytest.approx(5e-7)}
    # the spike sits in the warm-up step: steady is calm
    doc = analyze(make_run(base_rows(actor__grad_norm=[6.0] + [0.5] * 9), SPEC), 1)
    assert "stabilize_grad_norm" not in ids(doc)


def test_entropy_collapse():
    collapsing = [0.4 * 0.6**i for i in range(10)]  # 0.4 -> ~0.004
    doc = analyze(make_run(base_rows(actor__entropy=collapsing), SPEC), 1)
    rec = next(r for r in doc["recommendations"] if r["id"] == "entropy_collapse")
    assert rec["change"] == {"algorithm.entropy_coeff": 0.001}
    doc = analyze(make_run(base_rows(actor__entropy=[0.4] * 10), SPEC), 1)
    assert "entropy_collapse" not in ids(doc)


def test_long_warmup_proposes_enough_steps_to_amortise():
    times = [100.0] + [10.0] * 9
    doc = analyze(make_run(base_rows(timing_s__step=times), SPEC), 1)
    rec = next(r for r in doc["recommendations"] if r["id"] == "long_warmup")
    n = rec["change"]["trainer.total_training_steps"]
    excess = 100.0 - 10.0

    def share(steps: int) -> float:
        return excess / (100.0 + (steps - 1) * 10.0)

    assert share(n) <= WARMUP_SHARE  # the proposal amortises the warm-up ...
    assert share(n - 5) > WARMUP_SHARE  # ... and is not needlessly large (rounded up to 5)
    # a mild first step is not worth a recommendation
    doc = analyze(make_run(base_rows(timing_s__step=[25.0] + [20.0] * 9), SPEC), 1)
    assert "long_warmup" not in ids(doc)


def test_recommendation_shape_and_order():
    rows = base_rows(
        actor__grad_norm=[0.5, 0.0] + [0.5] * 8,
        response_length__clip_ratio=[0.15] * 10,
        timing_s__step=[100.0] + [10.0] * 9,
    )
    recs = analyze(make_run(rows, SPEC), 1)["recommendations"]
    assert [r["id"] for r in recs] == ["raise_rollout_n", "raise_max_response_length", "long_warmup"]
    for r in recs:
        assert isinstance(r["evidence"], str) and r["evidence"]
        assert isinstance(r["change"], dict) and r["change"]
        assert all("." in k for k in r["change"])  # dotted spec.yaml paths
