"""GSM8K evaluation: markers → eval.json, the intervals (checked against independent values), and the
evaluation section in `report` and `compare`."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from eval_support import HEADLINE, eval_log, per_question, sorted_by_id
from launcher.cli.main import main
from launcher.run.eval import EVAL_JSON, eval_doc, write_eval_json
from launcher.spec.contract import marker_line
from launcher.metrics import LogParser, MetricsSink
from launcher.report.eval import (
    Z95,
    newcombe_interval,
    paired_bootstrap_interval,
    summarize,
    wilson_interval,
)

# --------------------------------------------------------------------------------------------------
# Intervals


def _wilson_by_bisection(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Independent Wilson interval: the p where the score statistic |p̂ − p| / sqrt(p(1−p)/n) equals z,
    found by bisection on each side of p̂ (no closed form involved)."""
    ph = k / n

    def stat(p):
        return abs(ph - p) / math.sqrt(p * (1 - p) / n) - z

    def root(lo, hi):  # stat(lo) and stat(hi) have opposite signs
        for _ in range(200):
            mid = (lo + hi) / 2
            if (stat(mid) > 0) == (stat(lo) > 0):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    eps = 1e-15
    lower = 0.0 if k == 0 else root(eps, ph)  # the score statistic is -z at p̂ and > 0 near 0
    upper = 1.0 if k == n else root(max(ph, eps), 1 - eps)
    return lower, upper


@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (81, 263), (939, 1319), (1300, 1319)])
def test_wilson_matches_score_test_inversion(k, n):
    lo, hi = wilson_interval(k, n)
    blo, bhi = _wilson_by_bisection(k, n)
    assert lo == pytest.approx(blo, abs=1e-9) and hi == pytest.approx(bhi, abs=1e-9)


def test_newcombe_matches_the_published_examples():
    # Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10 (hybrid score):
    # 56/70 − 48/80 → 0.0524 to 0.3339; 9/10 − 3/10 → 0.1705 to 0.8090.
    lo, hi = newcombe_interval(48 / 80, 80, 56 / 70, 70)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    lo, hi = newcombe_interval(3 / 10, 10, 9 / 10, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.1705, 0.8090)


def test_newcombe_is_antisymmetric_and_contains_the_estimate():
    lo, hi = newcombe_interval(0.6, 1319, 0.7, 1319)
    rlo, rhi = newcombe_interval(0.7, 1319, 0.6, 1319)
    assert (lo, hi) == pytest.approx((-rhi, -rlo))
    assert lo < 0.1 < hi


def test_paired_bootstrap_equals_the_exact_bootstrap_distribution_on_a_tiny_sample():
    # d = [1, 0, 0, 0]: the resampled mean is K/4 with K ~ Binomial(4, 1/4), enumerable exactly.
    base, trained = [0, 1, 1, 0], [1, 1, 1, 0]
    exact = sorted(np.mean([trained[i] - base[i] for i in idx]) for idx in itertools.product(range(4), repeat=4))
    cdf = {v: sum(x <= v for x in exact) / len(exact) for v in set(exact)}
    assert cdf[0.5] < 0.975 < cdf[0.75] and cdf[0.0] > 0.025  # so the exact 95% percentile interval is [0, 0.75]
    assert paired_bootstrap_interval(base, trained, seed=0) == (0.0, 0.75)


def test_paired_bootstrap_agrees_with_the_normal_approximation_on_a_large_sample():
    base = per_question(1319, 0.55, 1)
    trained = [b if np.random.default_rng(i).random() < 0.8 else 1 - b for i, b in enumerate(base)]
    d = np.array(trained) - np.array(base)
    se = d.std(ddof=1) / math.sqrt(d.size)
    lo, hi = paired_bootstrap_interval(base, trained, seed=3)
    assert lo == pytest.approx(d.mean() - Z95 * se, abs=0.004)
    assert hi == pytest.approx(d.mean() + Z95 * se, abs=0.004)
    assert paired_bootstrap_interval(base, trained, seed=3) == (lo, hi)  # seeded: reproducible


def test_paired_interval_is_narrower_than_newcombe_for_correlated_answers():
    base = per_question(1319, 0.6, 5)
    trained = list(base)
    for i in range(0, 1319, 15):  # the checkpoint fixes ~88 questions, breaks none
        trained[i] = 1
    pb = paired_bootstrap_interval(base, trained)
    nc = newcombe_interval(np.mean(base), 1319, np.mean(trained), 1319)
    assert pb[1] - pb[0] < (nc[1] - nc[0]) / 2
    assert pb[0] > 0  # pairing detects the gain...
    assert nc[0] < 0  # ...that an independent-samples interval cannot


# --------------------------------------------------------------------------------------------------
# eval.json from the log


def test_markers_split_val_lines_by_model_and_keep_per_question_scores():
    base, ckpt = per_question(200, 0.5, 1), per_question(200, 0.7, 2)
    doc = eval_doc(eval_log(base=base, ckpt=ckpt))
    assert doc["base"]["metrics"][HEADLINE] == pytest.approx(np.mean(base))
    assert doc["checkpoint"]["metrics"][HEADLINE] == pytest.approx(np.mean(ckpt))
    assert doc["checkpoint"]["step"] == 25 and doc["base"]["step"] is None
    assert doc["base"]["questions"]["strict"] == sorted_by_id(base)
    assert doc["base"]["questions"]["ids_sha256"] == doc["checkpoint"]["questions"]["ids_sha256"]


def test_the_metrics_sink_alone_would_lose_the_base_row():
    """Why eval.json exists: both models log at step 0, and the sink keeps one row per step."""
    import tempfile

    lines = eval_log()
    with tempfile.TemporaryDirectory() as d:
        parser = LogParser()
        with MetricsSink(d) as sink:
            sink.add_many(parser.feed_lines(lines), attempt=0)
        rows = [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 0
    assert rows[0][HEADLINE] == eval_doc(lines)["checkpoint"]["metrics"][HEADLINE]


def test_timestamped_and_cri_prefixed_markers_still_split():
    lines = [f"2026-11-29T10:00:00.123456789Z stdout F {x}" for x in eval_log(n=20)]
    doc = eval_doc(lines)
    assert set(doc) >= {"base", "checkpoint"} and doc["checkpoint"]["metrics"]


def test_val_line_before_any_marker_is_not_attributed_and_a_retry_wins():
    lines = ["step:0 - val-core/openai/gsm8k/acc/mean@1:np.float64(0.1)"]
    lines += eval_log(base=[0, 0, 0, 1], ckpt=[1, 1, 1, 1])  # first attempt
    lines += eval_log(base=[0, 0, 1, 1], ckpt=[0, 1, 1, 1])  # retried pod appended to the same file
    doc = eval_doc(lines)
    assert doc["base"]["metrics"][HEADLINE] == 0.5 and doc["checkpoint"]["metrics"][HEADLINE] == 0.75


def test_marker_validation():
    with pytest.raises(ValueError):
        marker_line("trained", model="/x")


def _eval_run_dir(d: Path, lines: list[str], *, with_metrics: bool = True) -> Path:
    (d / "logs").mkdir(parents=True)
    (d / "logs" / "grpo-exp3-eval-1234abcd-master-0.log").write_text("\n".join(lines) + "\n")
    if with_metrics:  # what the follower writes for an eval run: one step-0 row (the sink's view)
        parser = LogParser()
        with MetricsSink(d) as sink:
            sink.add_many(parser.feed_lines(lines), attempt=0)
    return d


def test_write_eval_json_and_summary_paired(tmp_path):
    base, ckpt = per_question(400, 0.5, 11), per_question(400, 0.8, 12)
    d = _eval_run_dir(tmp_path / "ev", eval_log(base=base, ckpt=ckpt))
    doc = write_eval_json(d)
    assert json.loads((d / EVAL_JSON).read_text()) == doc
    s = summarize(doc)
    assert s["difference"]["estimate"] == pytest.approx(np.mean(ckpt) - np.mean(base))
    assert s["difference"]["method"].startswith("paired bootstrap over 400 questions")
    lo, hi = s["difference"]["ci"]
    assert (lo, hi) == paired_bootstrap_interval(sorted_by_id(base), sorted_by_id(ckpt), seed=0)


def test_summary_without_per_question_results_uses_newcombe(tmp_path):
    doc = eval_doc(eval_log(base=[1] * 60 + [0] * 40, ckpt=[1] * 75 + [0] * 25, questions=False))
    doc["base"]["questions"] = {"n": 100}
    doc["checkpoint"]["questions"] = {"n": 100}
    s = summarize(doc)
    assert s["difference"]["ci"] == pytest.approx(newcombe_interval(0.6, 100, 0.75, 100))
    assert "Newcombe" in s["difference"]["method"]
    doc["base"]["questions"] = doc["checkpoint"]["questions"] = None
    s = summarize(doc)
    assert s["difference"]["ci"] is None and any("no question count" in n for n in s["notes"])


def test_report_of_an_eval_run_dir_has_the_section(tmp_path, capsys):
    d = _eval_run_dir(tmp_path / "ev", eval_log(base=per_question(300, 0.5, 1), ckpt=per_question(300, 0.9, 2)))
    assert main(["report", str(d), "--no-plots"]) == 0
    md = (d / "report.md").read_text()
    assert "## GSM8K evaluation: base vs trained" in md
    assert "Trained − base:" in md and "95% CI" in md and "paired bootstrap" in md
    assert "format learning" in md and "#### <number>" in md
    data = json.loads((d / "report.json").read_text())["sections"]["evaluation"]
    assert data["models"]["checkpoint"]["step"] == 25 and data["difference"]["ci"][0] > 0
    assert (d / EVAL_JSON).is_file()  # built from the logs on first use


def test_report_of_a_training_run_with_eval_flag(tmp_path, capsys):
    from test_report_cli import make_run_dir

    train = make_run_dir(tmp_path / "train")
    ev = _eval_run_dir(tmp_path / "ev", eval_log(n=50))
    assert main(["report", str(train), "--no-plots"]) == 0
    assert "GSM8K evaluation" not in (train / "report.md").read_text()  # nothing to show by itself
    assert main(["report", str(train), "--no-plots", "--eval", str(ev)]) == 0
    assert "## GSM8K evaluation: base vs trained" in (train / "report.md").read_text()
    empty = tmp_path / "empty"
    (empty / "logs").mkdir(parents=True)
    assert main(["report", str(train), "--no-plots", "--eval", str(empty)]) == 2


def test_compare_shows_each_runs_evaluation(tmp_path, capsys):
    a = _eval_run_dir(tmp_path / "a", eval_log(n=80, ckpt=per_question(80, 0.6, 3)))
    b = _eval_run_dir(tmp_path / "b", eval_log(n=80, ckpt=per_question(80, 0.8, 4)))
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--no-plots", "-o", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert md.count("## GSM8K evaluation: base vs trained") == 2
    assert set(json.loads((out / "compare.json").read_text())["sections"]) == {"a/evaluation", "b/evaluation"}
