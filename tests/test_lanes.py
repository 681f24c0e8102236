"""hack/lanes.py, the runner of `make run`'s build lanes and `make test`'s installs: fake lanes (sleep, echo, exit),
run for real as subprocesses (exit codes, process groups, signals) and in-process (estimates, the terminal view).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lanes

SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "lanes.py"
KEYS = {"phase", "lane", "seconds", "rc"}


def _run(tmp_path: Path, *specs: str, phase: str = "build") -> subprocess.CompletedProcess:
    env = {**os.environ, "GRPO_CACHE": str(tmp_path / "cache"), "GRPO_TIMINGS_FILE": str(tmp_path / "t.jsonl")}
    return subprocess.run([sys.executable, str(SCRIPT), phase, *specs], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie is dead, waiting for whoever reaps orphans here


def _dies(pid: int) -> bool:
    """Whether pid is gone within 10 s (a SIGKILL lands at once; this only absorbs a loaded machine's delay)."""
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _timings(tmp_path: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert all(set(r) == KEYS for r in rows), rows
    return {r["lane"]: r for r in rows}


def test_a_failed_lane_prints_its_log_stops_the_others_and_exits_with_its_code(tmp_path):
    # `slow` leaves a grandchild (sleep, in the background) that only the process-group kill can stop; `bad` fails
    # once that grandchild exists and `ok` has ended.
    r = _run(tmp_path, "ok=sleep 0.2; echo x; touch ok-done",
             "slow=sleep 60 & echo $! > gpid; wait",
             "bad=until [ -s gpid ] && [ -e ok-done ]; do sleep 0.05; done; sleep 0.3; "
             "echo first line; echo the evidence >&2; exit 3")
    assert r.returncode == 3, r.stdout + r.stderr
    out = r.stdout
    assert "first line\nthe evidence\n" in out  # the whole log, stdout and stderr
    assert "lane bad FAILED (exit 3)" in out and "lanes stopped: slow" in out
    log = tmp_path / "cache" / "logs"
    assert f"its log: {next(log.glob('build-*'))}/bad.log" in out
    assert _dies(int((tmp_path / "gpid").read_text()))
    t = _timings(tmp_path)
    assert (t["ok"]["rc"], t["bad"]["rc"], t["slow"]["phase"]) == (0, 3, "build")
    assert t["slow"]["rc"] != 0 and t["bad"]["seconds"] > 0
    # not a terminal: the header, a line per ended lane, the log and the verdict; nothing else
    assert len(out.splitlines()) <= 10, out


def test_success_prints_each_time_and_keeps_ci_output_short(tmp_path):
    r = _run(tmp_path, "a=sleep 0.2; echo x", "b=echo go: downloading example.com/m v1; echo y", phase="installs")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) <= 5, r.stdout  # header, estimates, a line per lane, the summary
    assert lines[-1].startswith("== installs: done in ") and " a " in lines[-1] and " b " in lines[-1]
    assert "go: downloading" not in r.stdout  # the tools' output stays in the logs
    d = next((tmp_path / "cache" / "logs").glob("installs-*"))
    assert (d / "b.log").read_text() == "go: downloading example.com/m v1\ny\n"
    assert {lane: row["rc"] for lane, row in _timings(tmp_path).items()} == {"a": 0, "b": 0}


def test_sigterm_stops_the_lanes(tmp_path):
    # the test's own timings file: CI's (GRPO_TIMINGS_FILE in the environment) must not get this lane's row
    env = {**os.environ, "GRPO_CACHE": str(tmp_path / "cache"), "GRPO_TIMINGS_FILE": str(tmp_path / "t.jsonl")}
    p = subprocess.Popen([sys.executable, str(SCRIPT), "build", "slow=sleep 60 & echo $! > gpid; wait"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    gpid = tmp_path / "gpid"
    for _ in range(600):  # the lane has started its grandchild
        if gpid.exists() and gpid.read_text().strip() or p.poll() is not None:
            break
        time.sleep(0.05)
    assert p.poll() is None and gpid.read_text().strip()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM, out  # it dies of the signal, after stopping its lanes
    assert "interrupted (SIGTERM); lanes stopped: slow" in out
    assert _dies(int((tmp_path / "gpid").read_text()))


def test_the_estimate_comes_from_the_last_recorded_build(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "lane-times.json").write_text(json.dumps({"a": 600}))
    out = io.StringIO()
    # a terminal's view: the lane's line is redrawn with its last meaningful line and the time left
    assert lanes.run_lanes("build", [("a", "echo compiling; echo go: added x v1; sleep 1.5"), ("new", "sleep 1.5")],
                           cache=cache, out=out, tty=True) == 0
    text = out.getvalue()
    assert "last measured builds: a 10m00s, new none (no estimate)" in text
    assert "~10 min left  | compiling" in text and "first build, no estimate" in text
    assert "\x1b[2A" in text  # redrawn in place
    # a success this short is a no-op over the cache: the 10 min stay the estimate
    assert json.loads((cache / "lane-times.json").read_text()) == {"a": 600}
    # a real build's time replaces it
    assert lanes.run_lanes("build", [("a", "true")], cache=cache, out=io.StringIO(), tty=False, noop_s=0) == 0
    assert json.loads((cache / "lane-times.json").read_text())["a"] < 600


def test_the_time_left_and_the_activity_line():
    assert lanes.remaining(0, None) == "first build, no estimate"
    assert lanes.remaining(125, 600) == "~8 min left"
    assert lanes.remaining(700, 600) == "past the last build's 10m00s"


def test_the_activity_is_the_last_meaningful_line(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"[build 10:00:00] kubernetes: building\ngo: downloading a v1\ngo: added b v2\n\n")
    assert lanes.last_line(log) == "[build 10:00:00] kubernetes: building"
    log.write_bytes(b"STEP 3/9: RUN pip install\r 10%\r\x1b[32m 55%\x1b[0m\r")
    assert lanes.last_line(log) == "55%"
    assert lanes.last_line(tmp_path / "missing.log") == ""


def test_bad_arguments_exit_2(tmp_path):
    r = _run(tmp_path, "no-command-here")
    assert r.returncode == 2 and "usage: lanes.py PHASE NAME=COMMAND" in r.stderr
    assert _run(tmp_path, "a=true", "a=true").returncode == 2  # names must be distinct
