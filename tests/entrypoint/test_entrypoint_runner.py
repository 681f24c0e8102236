"""Child process handling: exit status, live output, SIGTERM forwarding and the SIGKILL grace path.

The entrypoint runs as a real subprocess (`python -m launcher.entrypoint`) with a stand-in trainer
(`LAUNCHER_CHILD_CMD`), so signals travel exactly as in a pod: kubelet → entrypoint → child group.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from entrypoint_support import standin_config
from launcher.spec.load import load_spec
from launcher.entrypoint.runner import Child, exit_status, run_child

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "fixtures" / "entrypoint" / "trainer_standin.py"


def _entrypoint(tmp: Path, child: str, extra_args: tuple[str, ...] = (), **extra_env: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HOME": str(tmp), "LAUNCHER_CHILD_CMD": child,
           "LAUNCHER_ATTEMPT": "t1", **extra_env}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "launcher.entrypoint", "--config", str(standin_config(tmp)), *extra_args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )


def _read_until(proc: subprocess.Popen, needle: bytes) -> bytes:
    """The process's output up to the line holding `needle`, or to its end. A hang is bounded by the test's
    pytest-timeout mark, not by a clock here (readline blocks; a busy machine is slow, not wrong)."""
    seen = b""
    while needle not in seen:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    return seen


def test_exit_status_convention():
    assert exit_status(0) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGTERM) == 143
    assert exit_status(-signal.SIGKILL) == 137


@pytest.mark.timeout(60)
def test_child_exit_code_propagates(tmp_path):
    proc = _entrypoint(tmp_path, f"{sys.executable} {STANDIN} exit 3")
    out, _ = proc.communicate(timeout=50)
    assert proc.returncode == 3, out
    text = out.decode()
    assert "stand-in trainer: exiting 3" in text
    assert "[entrypoint] role=single-node" in text
    assert "[entrypoint] starting verl: " in text
    assert "[entrypoint] verl exited with status 3" in text
    # the entrypoint created the run's checkpoint directory (per job name) and ran the child there
    assert (Path(load_spec(standin_config(tmp_path)).checkpoint_path) / "metrics").is_dir()
    assert "[entrypoint] attempt 1: starting fresh (no checkpoint yet); steps lost: 0" in text


@pytest.mark.timeout(60)
def test_output_is_streamed_while_the_child_runs(tmp_path):
    proc = _entrypoint(tmp_path, f"{sys.executable} {STANDIN} stream")
    _read_until(proc, b"first\n")
    # "first" arrived while the child sleeps 3 s before "second": nothing waits for the child to end.
    assert proc.poll() is None
    rest, _ = proc.communicate(timeout=30)
    assert b"second" in rest and proc.returncode == 0


@pytest.mark.timeout(60)
def test_sigterm_is_forwarded_and_the_childs_status_returned(tmp_path):
    proc = _entrypoint(tmp_path, f"{sys.executable} {STANDIN} trap")
    _read_until(proc, b"ready\n")
    os.kill(proc.pid, signal.SIGTERM)  # kubelet stopping the pod signals the entrypoint only
    out, _ = proc.communicate(timeout=30)
    assert b"got SIGTERM" in out
    assert b"received signal 15" in out
    assert proc.returncode == 143


@pytest.mark.timeout(60)
def test_sigint_kills_a_child_without_handler_as_128_plus_signum(tmp_path):
    proc = _entrypoint(tmp_path, f"{sys.executable} -c \"import time; print('ready', flush=True); time.sleep(60)\"")
    _read_until(proc, b"ready\n")
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    # an unhandled KeyboardInterrupt makes python re-raise SIGINT on itself: killed by signal 2 -> 130
    assert b"received signal 2" in out
    assert proc.returncode == 130, out


@pytest.mark.timeout(60)
def test_entrypoint_sigkills_a_child_that_ignores_sigterm_after_the_grace_period(tmp_path):
    proc = _entrypoint(tmp_path, f"{sys.executable} {STANDIN} ignore", LAUNCHER_KILL_GRACE_S="2")
    _read_until(proc, b"ready\n")
    start = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    elapsed = time.monotonic() - start
    assert b"still running 2s after signal 15: SIGKILL" in out
    assert proc.returncode == 137, out
    assert elapsed >= 1.9  # it waited out the grace period (no upper bound: a busy machine is slow)


def _wait_until_ignored(pid: int, signum: int) -> None:
    """Until the process ignores `signum` (the SigIgn mask in /proc/PID/status): a fixed sleep was a guess that a
    busy machine can lose (SIGTERM before SIG_IGN kills with 143), and a second lost on a quiet one. A hang is
    bounded by the test's pytest-timeout mark."""
    bit = 1 << (signum - 1)
    while not int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", Path(f"/proc/{pid}/status").read_text(), re.M)[1], 16) & bit:
        time.sleep(0.01)


@pytest.mark.timeout(60)
def test_child_ignoring_sigterm_is_killed_after_the_grace_period():
    child = Child([sys.executable, str(STANDIN), "ignore"], dict(os.environ), grace_s=1.5)
    child.start()
    _wait_until_ignored(child.pid, signal.SIGTERM)
    start = time.monotonic()
    child.terminate(signal.SIGTERM)
    code = child.wait(timeout=20)
    elapsed = time.monotonic() - start
    assert code == 137
    assert elapsed >= 1.4  # it waited out the grace period (no upper bound: a busy machine is slow)


@pytest.mark.timeout(60)
def test_run_child_forwards_signals_to_the_whole_group(tmp_path):
    # The child spawns a grandchild; SIGTERM to the runner's process must reach both.
    marker = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(marker)!r}, 'w').write(str(p.pid)); print('ready', flush=True); time.sleep(60)"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from launcher.entrypoint.runner import run_child; "
         f"sys.exit(run_child([sys.executable, '-c', {script!r}], dict(__import__('os').environ), grace_s=5))"],
        env={**os.environ, "PYTHONPATH": str(REPO / "src")}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _read_until(runner, b"ready\n")
    grandchild = int(marker.read_text())
    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=30)
    assert runner.returncode == 143  # the child was killed by SIGTERM: 128 + 15
    deadline = time.monotonic() + 60  # patience for a busy machine, not a speed bound: it normally goes at once
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail("grandchild survived the forwarded SIGTERM")


def test_run_child_in_process_sets_unbuffered(tmp_path):
    out = tmp_path / "env.txt"
    code = run_child([sys.executable, "-c", f"import os; open({str(out)!r},'w').write(os.environ['PYTHONUNBUFFERED'])"],
                     {**os.environ, "PYTHONUNBUFFERED": "0"})
    assert code == 0 and out.read_text() == "1"
