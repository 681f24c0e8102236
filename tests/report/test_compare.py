"""`launcher compare`: headline table from steady windows, config diff, overlaid plots, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from matplotlib import image as mpimg

from launcher.cli.main import main
from launcher.report.compare import config_diff


def make_exp(d: Path, n_rollout: int, resp: int, seed: int, spec: bool = True, steps: int = 10) -> list[dict]:
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in range(1, steps + 1):
        t = 90.0 if s == 1 else float(rng.uniform(15, 25)) * n_rollout / 2
        tok = 8 * n_rollout * 300
        rows.append(
            {
                "step": s,
                "critic/score/mean": float(rng.uniform(0.3, 0.9)),
                "response_length/clip_ratio": float(rng.uniform(0, 0.3)),
                "actor/grad_norm": 0.5,
                "actor/entropy": 0.4,
                "response_length/mean": resp * 0.7,
                "timing_s/step": t,
                "perf/total_num_tokens": tok,
                "perf/throughput": tok / (2 * t),
            }
        )
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if spec:
        (d / "spec.yaml").write_text(
            yaml.safe_dump(
                {
                    "name": d.name,
                    "data": {"max_response_length": resp, "train_batch_size": 8},
                    "rollout": {"n": n_rollout, "temperature": 1.0},
                    "resources": {"nodes": 1, "gpus_per_node": 2},
                }
            )
        )
    return rows


def test_compare_exp3_exp4(tmp_path, capsys):
    r3 = make_exp(tmp_path / "grpo-exp3", 2, 256, 3)
    r4 = make_exp(tmp_path / "grpo-exp4", 4, 512, 4)
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "grpo-exp3"), str(tmp_path / "grpo-exp4"), "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads((out / "compare.json").read_text())
    assert [r["name"] for r in doc["runs"]] == ["grpo-exp3", "grpo-exp4"]
    for run, rows in zip(doc["runs"], (r3, r4)):
        steady = rows[1:]
        h = run["headline"]
        assert h["critic/score/mean"]["mean"] == pytest.approx(np.mean([r["critic/score/mean"] for r in steady]))
        assert h["timing_s/step"]["mean"] == pytest.approx(np.mean([r["timing_s/step"] for r in steady]))
        assert h["throughput_total"]["mean"] == pytest.approx(
            np.mean([r["perf/total_num_tokens"] / r["timing_s/step"] for r in steady])
        )
        assert h["timing_s/step@sum_all"]["mean"] == pytest.approx(sum(r["timing_s/step"] for r in rows))
    assert doc["config_diff"] == {
        "data.max_response_length": [256, 512],
        "name": ["grpo-exp3", "grpo-exp4"],
        "rollout.n": [2, 4],
    }
    md = (out / "compare.md").read_text()
    assert "| `rollout.n` | `2` | `4` |" in md
    assert "| `data.max_response_length` | `256` | `512` |" in md
    assert "B − A" in md
    for png in ("compare_metrics.png", "compare_score_vs_clip.png"):
        img = mpimg.imread(out / png)
        assert (out / png).stat().st_size > 10_000 and img[..., :3].std() > 0.05
        assert f"]({png})" in md


def test_compare_default_output_dir_and_missing_spec(tmp_path):
    make_exp(tmp_path / "a", 2, 256, 1)
    make_exp(tmp_path / "b", 4, 512, 2, spec=False)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--no-plots"]) == 0
    out = tmp_path / "compare-a-vs-b"
    md = (out / "compare.md").read_text()
    assert "b: no spec.yaml" in md
    assert not list(out.glob("*.png"))


def test_compare_needs_two_runs_and_existing_dirs(tmp_path, capsys):
    make_exp(tmp_path / "a", 2, 256, 1)
    assert main(["compare", str(tmp_path / "a")]) == 2
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "at least two" in err and "does not exist" in err


def test_config_diff_ignores_runs_without_spec_and_marks_absent_fields():
    diff = config_diff([{"a": {"b": 1}, "c": 2}, None, {"a": {"b": 1}}])
    assert diff == {"c": [2, None, "<absent>"]}
    assert config_diff([{"x": [1, 2]}, {"x": [1, 2]}]) == {}
