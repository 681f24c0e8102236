"""Hostile and broken input: fuzzing (atheris) and bombs/huge/binary files through the CLI.

The fuzz counts default to a CI-sized budget for the unit lane, under a minute each on CI's busy 2 cores: 200,000
log inputs (~50 s; the parser's 54 edges are all reached within the first ~20,000, new features still trickle in)
and 10,000 configs (~15 s). `make fuzz` (mk/fuzz.mk) runs the same tests deep, at the issue's floor: a million log
inputs (490-650 s in the unit lane), ten thousand configs. FUZZ_LOG_RUNS / FUZZ_CONFIG_RUNS set any other count.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
FUZZ = HERE / "fuzz"
ROOT = HERE.parent
LOG_RUNS = int(os.environ.get("FUZZ_LOG_RUNS", 200_000))  # the deep 1,000,000: `make fuzz` (mk/fuzz.mk)
CONFIG_RUNS = int(os.environ.get("FUZZ_CONFIG_RUNS", 10_000))


def _fuzz(target: str, corpus: str, runs: int, tmp_path: Path, max_len: int) -> str:
    work = tmp_path / corpus
    shutil.copytree(FUZZ / corpus, work)  # libFuzzer adds to its corpus dir: keep the repo's clean
    out = subprocess.run(
        [sys.executable, str(FUZZ / target), f"-runs={runs}", "-seed=1", f"-max_len={max_len}",
         "-rss_limit_mb=2048", "-timeout=10", str(work)],
        capture_output=True, text=True, cwd=tmp_path, timeout=1800,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    done = re.search(r"Done (\d+) runs", log)
    assert done and int(done.group(1)) >= runs, log[-2000:]
    print(f"{target}: {done.group(0)}")
    return log


@pytest.mark.slow
def test_fuzz_log_parser(tmp_path):
    _fuzz("fuzz_log_parser.py", "corpus_log", LOG_RUNS, tmp_path, max_len=2048)


@pytest.mark.slow
def test_fuzz_config(tmp_path):
    _fuzz("fuzz_config.py", "corpus_config", CONFIG_RUNS, tmp_path, max_len=4096)


def _limited(argv: list[str], seconds: float = 20, memory: int = 1 << 30) -> subprocess.CompletedProcess:
    """Run the CLI with an address-space cap: a refusal must come small, bounded by the loader's limits (which the
    callers' messages name), not by how fast this machine is; `seconds` only stops a hang."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (memory * 2, memory * 2))  # python itself maps ~0.5 GiB

    return subprocess.run([sys.executable, "-m", "launcher", *argv], capture_output=True, text=True,
                          timeout=seconds, preexec_fn=cap)


def _bomb(path: Path) -> Path:
    path.write_text("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    return path


def _deep(path: Path) -> Path:
    path.write_text("name: x\nx: " + "{a: " * 10000 + "1" + "}" * 10000 + "\n")
    return path


def _huge(path: Path) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(4 << 30)  # sparse 4 GiB
    return path


def _binary(path: Path) -> Path:
    path.write_bytes(os.urandom(1 << 16).replace(b"\n", b"\x00") + b"\x00")
    return path


@pytest.mark.parametrize("verb", ["validate", "render"])
@pytest.mark.parametrize("make,needle", [(_bomb, "aliases"), (_deep, "nesting deeper"), (_huge, "at most"),
                                         (_binary, "binary data")])
def test_config_verbs_refuse_hostile_files(tmp_path, verb, make, needle):
    out = _limited([verb, str(make(tmp_path / "c.yaml"))])
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and out.stderr.count("\n") <= 2, out.stderr
    assert "Traceback" not in out.stderr


def test_metrics_refuses_binary(tmp_path):
    out = _limited(["metrics", str(_binary(tmp_path / "log.bin")), "-o", str(tmp_path / "m")])
    assert out.returncode == 2 and "binary data" in out.stderr, out.stderr


def test_metrics_huge_line_is_bounded(tmp_path):
    # 3 GiB of one line with no newline (a sparse file reads as NULs; use a real pattern instead).
    path = tmp_path / "one-line.log"
    chunk = b"step:1 - a:" + b"9" * (1 << 20)
    with open(path, "wb") as fh:
        for _ in range(300):  # ~300 MiB, no newline anywhere
            fh.write(chunk)
    out = _limited(["metrics", str(path), "-o", str(tmp_path / "m")], seconds=120, memory=1 << 30)
    assert out.returncode == 0, out.stderr
    assert "0 steps" in out.stdout and "truncated 1" in out.stdout, out.stdout


@pytest.mark.parametrize("verb", ["validate", "render"])
def test_yaml_bomb_via_set_is_refused(tmp_path, verb):
    out = _limited([verb, str(ROOT / "configs" / "grpo-exp3.yaml"), "--set", "scheduling.node_selector=&a {a: *a}"])
    assert out.returncode == 2 and "aliases" in out.stderr, out.stderr
