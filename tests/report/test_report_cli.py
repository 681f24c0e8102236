"""`launcher report`: files, the JSON contract, exit codes, plots that show the data, extra sections."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from matplotlib import image as mpimg

from launcher.cli.main import main
from launcher.report import SECTION_PROVIDERS, Section, load_run, write_report

PNGS = [
    "score.png",
    "entropy.png",
    "pg_loss.png",
    "grad_norm.png",
    "response_length.png",
    "throughput.png",
    "score_vs_clip.png",
]
SPEC = {
    "name": "grpo-exp3",
    "backend": "pytorchjob",
    "model": {"path": "Qwen/Qwen2.5-3B-Instruct"},
    "data": {"train_batch_size": 8, "max_prompt_length": 512, "max_response_length": 256},
    "rollout": {"n": 2, "temperature": 1.0},
    "actor": {"lr": 1e-6, "ppo_mini_batch_size": 8},
    "trainer": {"total_training_steps": 12},
    "resources": {"nodes": 1, "gpus_per_node": 2},
}


def make_run_dir(d: Path, n: int = 12, spec: dict | None = SPEC, drop: tuple[str, ...] = ()) -> Path:
    rng = np.random.default_rng(1)
    d.mkdir(parents=True, exist_ok=True)
    rows = [{"step": 0, "val-core/openai/gsm8k/acc/mean@1": 0.62}]
    for s in range(1, n + 1):
        t = 90.0 if s == 1 else float(rng.uniform(18, 21))
        tok = int(rng.integers(4000, 5000))
        row = {
            "step": s,
            "critic/score/mean": float(rng.uniform(0.3, 0.9)),
            "actor/entropy": 0.4 - 0.01 * s,
            "actor/pg_loss": float(rng.normal(0, 0.01)),
            "actor/grad_norm": 0.0 if s in (3, 7) else 0.6,
            "response_length/mean": 190.0,
            "response_length/max": 256.0,
            "response_length/min": 80.0,
            "response_length/clip_ratio": float(rng.uniform(0.1, 0.3)),
            "timing_s/step": t,
            "perf/total_num_tokens": tok,
            "perf/throughput": tok / (t * 2),
            "response_length_non_aborted/mean": None,
        }
        for k in drop:
            row.pop(k, None)
        rows.append(row)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if spec is not None:
        (d / "spec.yaml").write_text(yaml.safe_dump(spec))
    return d


def test_report_writes_files_and_json_contract(tmp_path, capsys):
    run = make_run_dir(tmp_path / "grpo-exp3")
    assert main(["report", str(run)]) == 0
    for name in ["report.md", "report.json", *PNGS]:
        assert (run / name).is_file(), name
    doc = json.loads((run / "report.json").read_text())
    assert doc["training_steps"] == 12 and doc["warmup_steps"] == 1
    for w, first in (("all", 1), ("steady", 2)):
        win = doc["windows"][w]
        assert (win["first_step"], win["last_step"]) == (first, 12)
        assert set(win["metrics"]["critic/score/mean"]) == {"mean", "std", "min", "max", "n"}
        assert set(win["throughput_total"]) == {"mean", "std", "min", "max", "n"}
        p = doc["pearson"][w]["critic/score/mean~response_length/clip_ratio"]
        assert {"r", "n", "ci95"} <= set(p) and len(p["ci95"]) == 2
    assert doc["zero_signal_steps"] == [3, 7]
    rec_ids = [r["id"] for r in doc["recommendations"]]
    assert "raise_rollout_n" in rec_ids and "raise_max_response_length" in rec_ids
    assert all(set(r) >= {"id", "evidence", "change"} for r in doc["recommendations"])
    # the step that logged null is kept out of that key's statistics
    assert doc["windows"]["all"]["metrics"]["response_length_non_aborted/mean"]["n"] == 0

    md = (run / "report.md").read_text()
    assert "| `rollout.n` | `2` |" in md  # config header
    assert "per GPU" in md and "whole job" in md  # which throughput is which
    assert "steps 2–12" in md  # steady window stated
    assert "3, 7" in md and "raise_rollout_n" in md
    for png in PNGS:
        assert f"]({png})" in md


def test_a_builtin_model_says_what_it_is_in_the_config_table(tmp_path, capsys):
    spec = {**SPEC, "model": {"path": "builtin:tiny-qwen2"}, "resources": {"nodes": 1, "gpus_per_node": 0}}
    run = make_run_dir(tmp_path / "cpu", spec=spec)
    assert main(["report", str(run)]) == 0
    md = (run / "report.md").read_text()
    assert ("| `model.path` | `builtin:tiny-qwen2` (tiny random Qwen2, 357,632 parameters, in the project's images; test "
            "model, not Qwen2.5) |") in md
    run = make_run_dir(tmp_path / "gpu")  # a hub model is shown as it is
    assert main(["report", str(run)]) == 0
    assert "| `model.path` | `Qwen/Qwen2.5-3B-Instruct` |" in (run / "report.md").read_text()


def test_json_flag_prints_the_document_and_output_dir(tmp_path, capsys):
    run = make_run_dir(tmp_path / "r")
    out = tmp_path / "out"
    assert main(["report", str(run), "--json", "-o", str(out), "--warmup-steps", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "report.json").read_text())
    assert printed["warmup_steps"] == 2 and printed["windows"]["steady"]["first_step"] == 3
    assert not (run / "report.json").exists()


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: None, "does not exist"),
        (lambda d: d.mkdir(), "metrics.jsonl not found"),
        (lambda d: (d.mkdir(), (d / "metrics.jsonl").write_text("garbage\n")), "no readable metric row"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, setup, message):
    d = tmp_path / "run"
    setup(d)
    assert main(["report", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_negative_warmup_is_bad_input(tmp_path, capsys):
    assert main(["report", str(make_run_dir(tmp_path / "r")), "--warmup-steps", "-1"]) == 2
    assert "--warmup-steps" in capsys.readouterr().err


def test_edge_runs_do_not_crash_and_say_what_is_missing(tmp_path):
    run = make_run_dir(tmp_path / "r", n=1, spec=None, drop=("actor/entropy", "response_length/clip_ratio"))
    assert main(["report", str(run), "--warmup-steps", "4"]) == 0
    md = (run / "report.md").read_text()
    assert "spec.yaml not found" in md
    assert "steady window is empty" in md
    assert "entropy.png skipped" in md and not (run / "entropy.png").exists()
    assert (run / "score.png").is_file()


def test_steps_missing_from_the_log_are_named(tmp_path):
    """A step line the kubelet dropped at a log rotation leaves a hole: the report names it, once."""
    run = make_run_dir(tmp_path / "r", n=8)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] not in (4, 6)))
    assert main(["report", str(run)]) == 0
    notes = json.loads((run / "report.json").read_text())["notes"]
    hole = [n for n in notes if "no metrics line" in n]
    assert len(hole) == 1 and "2 training step(s) between 1 and 8" in hole[0] and ": 4, 6 (" in hole[0], notes
    assert hole[0] in (run / "report.md").read_text()
    whole = make_run_dir(tmp_path / "w", n=8)
    assert main(["report", str(whole)]) == 0
    assert not any("no metrics line" in n for n in json.loads((whole / "report.json").read_text())["notes"])


def _pixels_near(img: np.ndarray, hex_color: str, tol: float = 0.08) -> int:
    rgb = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(img[..., :3] - rgb).max(axis=-1) < tol).sum())


def test_plots_are_nonempty_and_show_the_data(tmp_path):
    run = make_run_dir(tmp_path / "r")
    assert main(["report", str(run)]) == 0
    for png in PNGS:
        path = run / png
        assert path.stat().st_size > 10_000, png
        img = mpimg.imread(path)
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 500
        assert img[..., :3].std() > 0.05, f"{png} looks blank"
    # the score line is drawn in its colour; the zero-signal markers in red on the grad-norm plot
    assert _pixels_near(mpimg.imread(run / "score.png"), "#1f77b4") > 500
    assert _pixels_near(mpimg.imread(run / "grad_norm.png"), "#d62728") > 100
    # without zero-signal steps the grad-norm plot has (almost) no red: the markers carry data
    run2 = make_run_dir(tmp_path / "r2")
    lines = [json.loads(x) for x in (run2 / "metrics.jsonl").read_text().splitlines()]
    for r in lines:
        if "actor/grad_norm" in r:
            r["actor/grad_norm"] = 0.6
    (run2 / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["report", str(run2)]) == 0
    assert _pixels_near(mpimg.imread(run2 / "grad_norm.png"), "#d62728") < 20


def test_extra_sections_extend_markdown_and_json(tmp_path, monkeypatch):
    from launcher.report import build
    from launcher.report.eval import provider as eval_provider

    run = load_run(make_run_dir(tmp_path / "r"))
    calls = []
    # importing launcher.report registered the GSM8K evaluation section, exactly once
    assert SECTION_PROVIDERS.count(eval_provider) == 1
    real_registry = list(SECTION_PROVIDERS)

    def provider(r, doc):
        calls.append(doc["training_steps"])
        return Section(
            key="evaluation",
            title="Evaluation",
            markdown="base 0.62 -> trained 0.71",
            data={"base": 0.62, "trained": 0.71, "nan": math.nan},
        )

    # a registry of our own, holding the real eval provider too (it finds no eval.json here: no section)
    registry = [eval_provider, provider]
    monkeypatch.setattr(build, "SECTION_PROVIDERS", registry)
    extra = Section(key="extra", title="Extra", markdown="hello")
    doc, written = write_report(run, tmp_path / "out", 1, extra_sections=[extra], plots=False)
    md = written["report.md"].read_text()
    assert "## Extra\n\nhello" in md and "## Evaluation\n\nbase 0.62 -> trained 0.71" in md
    saved = json.loads(written["report.json"].read_text())
    assert saved["sections"] == {"evaluation": {"base": 0.62, "trained": 0.71, "nan": None}}
    assert calls == [12]
    # write_report reads the registry, it never adds to it (not the extra sections, not on a second call)
    write_report(run, tmp_path / "out2", 1, extra_sections=[extra], plots=False)
    assert calls == [12, 12] and registry == [eval_provider, provider]
    assert SECTION_PROVIDERS == real_registry


def test_run_dir_may_be_a_job_name_under_the_runs_dir(tmp_path, monkeypatch, capsys):
    make_run_dir(tmp_path / "runs" / "grpo-exp3")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAUNCHER_RUNS_DIR", str(tmp_path / "runs"))
    assert main(["report", "grpo-exp3", "--no-plots"]) == 0
    assert (tmp_path / "runs" / "grpo-exp3" / "report.json").is_file()
    assert main(["report", "nope"]) == 2
    assert "does not exist" in capsys.readouterr().err
