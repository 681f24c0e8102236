"""Report statistics against values computed independently here (numpy / scipy on the raw inputs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from launcher.report.build import analyze, dumps
from launcher.report.markdown import render
from launcher.report.load import load_run, parse_metrics
from launcher.report.stats import PEARSON_PAIR

SCORE, CLIP = "critic/score/mean", "response_length/clip_ratio"


def write_run(d: Path, rows: list[dict], spec: dict | None = None) -> Path:
    """Write rows as metrics.jsonl, NaN as JSON null (what the metrics sink does)."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "metrics.jsonl", "w") as f:
        for r in rows:
            clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            f.write(json.dumps(clean) + "\n")
    if spec is not None:
        (d / "spec.yaml").write_text(yaml.safe_dump(spec))
    return d


def synthetic(n_steps: int, seed: int = 0, nan_every: int = 0, drop_key_every: int = 0) -> list[dict]:
    """A verl-like run: step-0 validation row, then training rows; optional NaNs and missing keys."""
    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "val-core/openai/gsm8k/acc/mean@1": 0.7}]
    for s in range(1, n_steps + 1):
        clip = float(rng.uniform(0, 0.4))
        row = {
            "step": s,
            SCORE: float(np.clip(0.8 - clip + rng.normal(0, 0.05), 0, 1)),
            CLIP: clip,
            "actor/entropy": float(rng.uniform(0.2, 0.5)),
            "actor/pg_loss": float(rng.normal(0, 0.02)),
            "actor/grad_norm": float(rng.uniform(0.1, 1.0)),
            "timing_s/step": float(90.0 if s == 1 else rng.uniform(15, 25)),
            "perf/total_num_tokens": int(rng.integers(3000, 6000)),
        }
        row["perf/throughput"] = row["perf/total_num_tokens"] / (row["timing_s/step"] * 2)
        if nan_every and s % nan_every == 0:
            row["actor/entropy"] = float("nan")
        if drop_key_every and s % drop_key_every == 0:
            del row["actor/pg_loss"]
        rows.append(row)
    return rows


def expected_describe(values: list[float]) -> dict:
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    d = sps.describe(v, ddof=1) if v.size >= 2 else None
    return {
        "mean": float(d.mean) if d else float(v[0]),
        "std": float(math.sqrt(d.variance)) if d else None,
        "min": float(d.minmax[0]) if d else float(v[0]),
        "max": float(d.minmax[1]) if d else float(v[0]),
        "n": int(v.size),
    }


def assert_stats_equal(got: dict, want: dict) -> None:
    assert got["n"] == want["n"]
    for f in ("mean", "std", "min", "max"):
        if want[f] is None:
            assert got[f] is None, f
        else:
            assert got[f] == pytest.approx(want[f], rel=1e-9, abs=1e-12), f


@pytest.mark.parametrize("k", [0, 1, 3])
def test_window_statistics_match_scipy(tmp_path, k):
    rows = synthetic(30, seed=k, nan_every=4, drop_key_every=5)
    doc = analyze(load_run(write_run(tmp_path / "r", rows)), warmup_steps=k)
    train = rows[1:]  # the step-0 validation row is not a training step
    assert doc["training_steps"] == 30
    windows = {"all": train, "steady": train[k:]}
    for name, wrows in windows.items():
        w = doc["windows"][name]
        assert (w["first_step"], w["last_step"]) == (wrows[0]["step"], wrows[-1]["step"])
        keys = {key for r in train for key in r if key != "step"}
        assert set(w["metrics"]) == keys
        for key in keys:
            assert_stats_equal(w["metrics"][key], expected_describe([r.get(key) for r in wrows]))
        tot = [r["perf/total_num_tokens"] / r["timing_s/step"] for r in wrows]
        assert_stats_equal(w["throughput_total"], expected_describe(tot))
    # NaNs and the dropped key really reduced n
    assert doc["windows"]["all"]["metrics"]["actor/entropy"]["n"] == 30 - 30 // 4
    assert doc["windows"]["all"]["metrics"]["actor/pg_loss"]["n"] == 30 - 30 // 5


def test_validation_row_is_not_a_training_step(tmp_path):
    doc = analyze(load_run(write_run(tmp_path / "r", synthetic(5))), warmup_steps=1)
    assert doc["training_steps"] == 5
    assert doc["windows"]["all"]["first_step"] == 1
    assert "val-core/openai/gsm8k/acc/mean@1" not in doc["windows"]["all"]["metrics"]
    assert doc["validation"]["val-core/openai/gsm8k/acc/mean@1"] == [{"step": 0, "value": 0.7}]


def test_gpu_count_implied_by_the_two_throughputs(tmp_path):
    spec = {"resources": {"nodes": 1, "gpus_per_node": 2}}
    doc = analyze(load_run(write_run(tmp_path / "r", synthetic(6), spec)), warmup_steps=1)
    assert doc["throughput"]["gpus_implied"] == pytest.approx(2.0)
    assert doc["throughput"]["gpus_expected"] == 2
    assert doc["throughput"]["note"] is None
    spec4 = {"resources": {"nodes": 2, "gpus_per_node": 2}}
    doc = analyze(load_run(write_run(tmp_path / "r4", synthetic(6), spec4)), warmup_steps=1)
    assert "differs" in doc["throughput"]["note"]


def test_pearson_matches_scipy_and_bootstrap_is_deterministic(tmp_path):
    rows = synthetic(40, seed=7)
    run = load_run(write_run(tmp_path / "r", rows))
    doc1, doc2 = analyze(run, 1), analyze(run, 1)
    train = rows[1:]
    for name, wrows in {"all": train, "steady": train[1:]}.items():
        p = doc1["pearson"][name][PEARSON_PAIR]
        x = np.array([r[SCORE] for r in wrows])
        y = np.array([r[CLIP] for r in wrows])
        want = sps.pearsonr(x, y)
        assert p["n"] == len(wrows)
        assert p["r"] == pytest.approx(want.statistic, abs=1e-10)
        lo, hi = p["ci95"]
        assert lo <= p["r"] <= hi
        # An independent paired percentile bootstrap (different RNG) lands close to ours.
        ref = sps.bootstrap(
            (x, y),
            lambda a, b: sps.pearsonr(a, b).statistic,
            paired=True,
            vectorized=False,
            n_resamples=2000,
            method="percentile",
            random_state=123,
        )
        assert lo == pytest.approx(ref.confidence_interval.low, abs=0.06)
        assert hi == pytest.approx(ref.confidence_interval.high, abs=0.06)
    assert doc1["pearson"] == doc2["pearson"]
    assert doc1["pearson"]["steady"][PEARSON_PAIR]["note"] is None  # n=39, strong r: nothing to warn


def test_pearson_warns_on_small_n_and_refuses_tiny_or_constant(tmp_path):
    doc = analyze(load_run(write_run(tmp_path / "a", synthetic(6))), warmup_steps=1)
    p = doc["pearson"]["steady"][PEARSON_PAIR]
    assert p["n"] == 5 and p["r"] is not None and "too small" in p["note"]

    doc = analyze(load_run(write_run(tmp_path / "b", synthetic(3))), warmup_steps=1)
    p = doc["pearson"]["steady"][PEARSON_PAIR]
    assert p["n"] == 2 and p["r"] is None and p["ci95"] is None and "not computed" in p["note"]

    rows = synthetic(12)
    for r in rows[1:]:
        r[CLIP] = 0.0
    doc = analyze(load_run(write_run(tmp_path / "c", rows)), warmup_steps=1)
    p = doc["pearson"]["all"][PEARSON_PAIR]
    assert p["r"] is None and "constant" in p["note"]


def test_single_step_and_warmup_larger_than_run(tmp_path):
    rows = synthetic(1)
    doc = analyze(load_run(write_run(tmp_path / "r", rows)), warmup_steps=5)
    assert doc["training_steps"] == 1 and doc["warmup_steps"] == 5
    steady = doc["windows"]["steady"]
    assert steady["first_step"] is None and steady["last_step"] is None
    assert all(m["n"] == 0 and m["mean"] is None for m in steady["metrics"].values())
    assert steady["throughput_total"]["n"] == 0
    one = doc["windows"]["all"]["metrics"][SCORE]
    assert one["n"] == 1 and one["mean"] == rows[1][SCORE] and one["std"] is None
    assert any("steady window is empty" in n for n in doc["notes"])
    json.loads(dumps(doc))  # still strict JSON


def test_all_null_and_missing_keys_are_reported_not_crashed(tmp_path):
    rows = [{"step": 1, SCORE: float("nan")}, {"step": 2, SCORE: float("nan"), "actor/entropy": 0.3}]
    doc = analyze(load_run(write_run(tmp_path / "r", rows)), warmup_steps=0)
    assert doc["windows"]["all"]["metrics"][SCORE] == {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    assert doc["zero_signal_fraction"] is None
    assert any("actor/grad_norm" in n for n in doc["notes"])
    assert doc["throughput"]["gpus_implied"] is None


def test_verl_filelogger_form_duplicates_and_bad_lines():
    lines = [
        '{"step": 1, "data": {"critic/score/mean": 0.5, "flag": true, "s": "x"}}',
        "not json",
        '{"step": 1, "critic/score/mean": 0.75}',
        '{"step": "two"}',
        '{"step": 2, "actor/entropy": null}',
    ]
    rows, notes = parse_metrics(lines)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["critic/score/mean"] == 0.75  # the later line for a step wins
    assert "flag" not in rows[0] and "s" not in rows[0]  # bool and str are not metrics
    assert math.isnan(rows[1]["actor/entropy"])
    text = " ".join(notes)
    assert "2 unreadable line" in text and "logged more than once" in text and "flag" in text


row_values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-10, 10**6))
row_keys = st.sampled_from(
    [
        SCORE,
        CLIP,
        "actor/grad_norm",
        "actor/entropy",
        "timing_s/step",
        "perf/total_num_tokens",
        "perf/throughput",
        "val-core/x/acc/mean@1",
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.dictionaries(row_keys, row_values, max_size=6), min_size=1, max_size=12), k=st.integers(0, 15))
def test_any_rows_give_strict_json_and_consistent_counts(tmp_path, rows, k):
    lines = [
        json.dumps(
            {"step": i, **{a: (None if isinstance(b, float) and not math.isfinite(b) else b) for a, b in r.items()}}
        )
        for i, r in enumerate(rows)
    ]
    parsed, _ = parse_metrics(lines)
    from launcher.report.load import Run

    doc = analyze(Run(path=tmp_path, name="h", rows=parsed, spec=None), warmup_steps=k)
    back = json.loads(dumps(doc), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    n_train = back["training_steps"]
    for w in ("all", "steady"):
        for m in back["windows"][w]["metrics"].values():
            assert 0 <= m["n"] <= n_train
            if m["n"]:
                assert m["min"] <= m["mean"] + 1e-6 * abs(m["mean"]) and m["mean"] <= m["max"] + 1e-6 * abs(m["max"])
    assert set(back["zero_signal_steps"]) <= {r["step"] for r in parsed}


def test_infinite_values_recorded_by_the_sink_are_named(tmp_path):
    d = write_run(tmp_path / "r", [{"step": 1, "actor/grad_norm": None, SCORE: None}, {"step": 2, SCORE: 0.5}])
    (d / "metrics.meta.json").write_text(json.dumps({"nonfinite": {"1": {"actor/grad_norm": "inf", SCORE: "nan"}}}))
    doc = analyze(load_run(d), warmup_steps=0)
    note = next(n for n in doc["notes"] if "metrics.meta.json" in n)
    assert "2 logged value(s)" in note and "step 1 actor/grad_norm = inf" in note
    assert doc["windows"]["all"]["metrics"][SCORE]["n"] == 1


def test_score_trend_is_the_least_squares_slope_with_its_t_interval(tmp_path):
    rows = [{"step": i, SCORE: 0.01 * i + (0.003 if i % 2 else -0.003)} for i in range(1, 26)]
    rows[4][SCORE] = float("nan")  # a step without the score is left out
    doc = analyze(load_run(write_run(tmp_path / "up", rows)), warmup_steps=1)
    tr = doc["trend"]
    x = np.array([r["step"] for r in rows if not math.isnan(r[SCORE])], dtype=float)
    y = np.array([r[SCORE] for r in rows if not math.isnan(r[SCORE])])
    fit = sps.linregress(x, y)
    half = sps.t.ppf(0.975, len(x) - 2) * fit.stderr
    assert tr["n"] == 24 and tr["slope_per_step"] == pytest.approx(fit.slope)
    assert tr["ci95"] == pytest.approx([fit.slope - half, fit.slope + half])
    assert tr["direction"] == "rising"
    assert f"**Score trend: rising**, {fit.slope:+.4g} per step over 24 steps" in render(doc, {})
    down = analyze(load_run(write_run(tmp_path / "down", [{"step": r["step"], SCORE: -r[SCORE]} for r in rows])), 1)
    assert down["trend"]["direction"] == "falling"
    noisy = [{"step": i, SCORE: [0.1, 0.9, 0.2, 0.8][i % 4]} for i in range(1, 13)]
    assert analyze(load_run(write_run(tmp_path / "flat", noisy)), 1)["trend"]["direction"] == "flat"
    few = analyze(load_run(write_run(tmp_path / "few", rows[:2])), 1)["trend"]
    assert few["slope_per_step"] is None and "at least 3" in few["note"]
