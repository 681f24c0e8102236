"""`launcher metrics` verb and `simlog` CLI."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import simlog

SIMLOG = Path(simlog.__file__)  # hack/simlog.py, run as the KWOK demo runs it
from launcher.cli.main import main
from launcher.metrics import parse_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_metrics_verb_on_simlog_file(tmp_path, capsys):
    log = tmp_path / "pod.log"
    simlog.main(["--steps", "7", "--val-before-train", "-o", str(log)])
    rc, out, err = _run(["metrics", str(log), "-o", str(tmp_path / "m")], capsys)
    assert rc == 0, err
    assert "8 steps" in out and "0 skipped" in out
    rows = [json.loads(ln) for ln in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(8))
    truth = simlog.expected_rows(steps=7, val_before_train=True)
    assert rows == truth
    assert (tmp_path / "m" / "metrics.csv").read_text().count("\n") == 9
    meta = json.loads((tmp_path / "m" / "metrics.meta.json").read_text())
    assert meta["parser"]["records"] == 8 and meta["steps"] == 8
    # second run into the same dir: nothing written twice
    rc, out, _ = _run(["metrics", str(log), "-o", str(tmp_path / "m")], capsys)
    assert rc == 0 and "0 rows written" in out
    assert (tmp_path / "m" / "metrics.jsonl").read_text().count("\n") == 8


def test_metrics_verb_cri_log_and_later_attempt(tmp_path, capsys):
    a0, a1 = tmp_path / "a0.log", tmp_path / "a1.log"
    simlog.main(["--steps", "4", "--cri", "-o", str(a0)])
    simlog.main(["--steps", "4", "--cri", "--seed", "9", "-o", str(a1)])
    out_dir = str(tmp_path / "m")
    assert _run(["metrics", str(a0), "-o", out_dir, "--attempt", "0"], capsys)[0] == 0
    assert _run(["metrics", str(a1), "-o", out_dir, "--attempt", "1"], capsys)[0] == 0
    rows = [json.loads(ln) for ln in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert rows == simlog.expected_rows(steps=4, seed=9)
    meta = json.loads((tmp_path / "m" / "metrics.meta.json").read_text())
    assert [r["step"] for r in meta["relogged"]] == [1, 2, 3, 4]


def test_metrics_verb_stdin(tmp_path, capsys, monkeypatch):
    data = "".join(simlog.generate(steps=3)).encode() + b"\xff\xfe binary junk\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    rc, out, _ = _run(["metrics", "-", "-o", str(tmp_path)], capsys)
    assert rc == 0 and "3 steps" in out and "non-UTF-8 1" in out


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_metrics_verb_unreadable_input_exit_2(tmp_path, capsys, what):
    path = tmp_path / "nope.log" if what == "missing" else tmp_path
    rc, out, err = _run(["metrics", str(path), "-o", str(tmp_path / "m")], capsys)
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and str(path) in err


def test_metrics_verb_output_is_a_file_exit_2(tmp_path, capsys):
    log = tmp_path / "x.log"
    log.write_text("step:1 - a:1.0\n")
    rc, _, err = _run(["metrics", str(log), "-o", str(log)], capsys)
    assert rc == 2 and "not a directory" in err


def test_metrics_verb_refuses_binary_files(tmp_path, capsys):
    log = tmp_path / "bin.log"
    log.write_bytes(bytes(range(256)) * 100)
    rc, _, err = _run(["metrics", str(log), "-o", str(tmp_path / "m")], capsys)
    assert rc == 2 and "binary data (NUL bytes)" in err


def test_metrics_verb_non_utf8_text_is_parsed_as_skipped(tmp_path, capsys):
    log = tmp_path / "latin1.log"
    log.write_bytes(bytes(range(1, 256)) * 100)  # no NUL: text-like, mostly invalid UTF-8
    rc, out, _ = _run(["metrics", str(log), "-o", str(tmp_path / "m")], capsys)
    assert rc == 0 and out.startswith("0 steps")


def test_metrics_verb_huge_single_line_is_bounded(tmp_path):
    """64 MiB without a newline, then a good line: bounded memory, counted as truncated."""
    log = tmp_path / "huge.log"
    with open(log, "wb") as f:
        f.write(b"step:1 - a:")
        block = b"9" * (1 << 20)
        for _ in range(64):
            f.write(block)
        f.write(b"\nstep:2 - a:2.0\n")
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's peak (here pytest's) across fork.
    code = (
        "import re,sys;from launcher.cli.main import main;rc=main(sys.argv[1:]);"
        "print('RSS_KB', re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1));sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", code, "metrics", str(log), "-o", str(tmp_path / "m")],
                       capture_output=True, text=True, timeout=120)  # a hang guard; the bound is the memory below
    assert p.returncode == 0, p.stderr
    assert "1 steps" in p.stdout and "truncated 1" in p.stdout
    rss_mb = int(p.stdout.split("RSS_KB ")[1]) / 1024
    assert rss_mb < 200, rss_mb  # the 64 MiB line was never held whole (plus interpreter ~60 MB)


def test_simlog_deterministic_and_seed_sensitive():
    a = "".join(simlog.generate(steps=5, seed=1))
    assert a == "".join(simlog.generate(steps=5, seed=1))
    assert a != "".join(simlog.generate(steps=5, seed=2))


def test_simlog_content_matches_notes():
    text = "".join(simlog.generate(steps=25, val_before_train=True))
    assert "\x1b[36m(TaskRunnerV1 pid=" in text and "Started a local Ray instance" in text
    assert "Token authentication is enabled" in text
    assert "\rTraining Progress:" in text
    assert text.rstrip("\n").endswith("'Final validation metrics: None'")
    rows = simlog.expected_rows(steps=25, val_before_train=True)
    assert rows[0]["step"] == 0 and "val-core/openai/gsm8k/acc/mean@1" in rows[0]
    train = rows[1:]
    assert len(train) == 25
    # the full key set in verl's order: the exp3 line of verl.md §5.4, stored as a fixture
    notes = parse_line((FIXTURES / "verl_notes_5_4_line.txt").read_text().strip())
    assert len(notes.metrics) == 68
    assert all(list(r)[1:] == list(notes.metrics) for r in train)
    assert list(train[0])[1:4] == ["global_seqlen/min", "global_seqlen/max", "global_seqlen/minmax_diff"]
    assert list(train[0])[-1] == "training/num_turns/min"
    assert any(r["actor/grad_norm"] == 0.0 for r in train)  # zero-signal steps exist
    assert train[0]["timing_s/step"] > max(r["timing_s/step"] for r in train[1:])  # slow step 1
    first, last = train[:8], train[-8:]
    assert sum(r["critic/score/mean"] for r in last) > sum(r["critic/score/mean"] for r in first)
    for r in train:
        assert r["perf/throughput"] == r["perf/total_num_tokens"] / (r["timing_s/step"] * 2)
    assert "num_turns/min:np.int32(2)" in text and "training/num_turns/max:np.int64(2)" in text


def test_simlog_cli_cri_format(tmp_path):
    out = tmp_path / "cri.log"
    p = subprocess.run([sys.executable, str(SIMLOG), "--steps", "2", "--cri", "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = out.read_bytes().decode().split("\n")[:-1]  # keep tqdm's \r inside lines
    import re

    pat = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) F ")
    assert all(pat.match(ln) for ln in lines)
    stamps = [ln.split(" ", 1)[0] for ln in lines]
    assert stamps == sorted(stamps)


def test_simlog_pace_sleeps_between_steps():
    t = time.monotonic()
    lines = list(simlog.generate(steps=3, pace=0.05))
    assert time.monotonic() - t >= 0.15
    assert sum("step:" in ln for ln in lines) == 3


def test_metrics_modules_never_import_kubernetes():
    code = (
        "import sys, launcher.metrics, launcher.cli.commands.metrics;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'torch', 'verl')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
