"""Why verl failed (launcher.entrypoint.failure), the stderr tail the runner keeps for it, and the entrypoint's
refusal to train again after a configuration error (a real entrypoint process with a stand-in trainer)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from entrypoint_support import standin_config
from launcher.entrypoint.failure import classify_failure
from launcher.entrypoint.runner import run_child
from launcher.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]

# Lines as the libraries print them (NCCL's watchdog and torch 2.x, gloo, Ray 2.x, Hydra 1.3 / OmegaConf 2.3).
TRANSIENT = [
    ("NCCL timeout", "[rank1]:[E1204 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
                     "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                     "ran for 600011 milliseconds before timing out."),
    ("gloo timeout", "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                     "[10.244.1.7]:40201"),
    ("gloo timeout", "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
                     "waiting 1800000ms for recv operation to complete"),
    ("torch.distributed", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
                          "process exited or there was a network error"),
    ("lost Ray node", "ray.exceptions.NodeDiedError: Task failed due to the node dying."),
    ("lost Ray node", "(raylet) The node with node id: 4c0e... and address: 10.244.2.5 and node name: 10.244.2.5 has "
                      "been marked dead because the detector has missed too many heartbeats from it."),
]
CONFIG = [
    ("Hydra override", "Could not override 'actor_rollout_ref.actor.no_such_key'."),
    ("Hydra override", "omegaconf.errors.ConfigAttributeError: Key 'no_such_key' is not in struct"),
    ("Hydra override", "hydra.errors.OverrideParseException: mismatched input '=' expecting <EOF>"),
]


@pytest.mark.parametrize("what, line", TRANSIENT)
def test_transient_failures(what, line):
    f = classify_failure(["Traceback (most recent call last):", line, "Error executing job"])
    assert (f.kind, f.what, f.line) == ("transient", what, line)


@pytest.mark.parametrize("what, line", CONFIG)
def test_configuration_errors(what, line):
    f = classify_failure(["Error executing job with overrides: [...]", line])
    assert (f.kind, f.what) == ("config", what)
    assert f.describe().startswith(f"config ({what}: ")


def test_a_transient_line_wins_and_anything_else_is_unknown():
    assert classify_failure([CONFIG[0][1], TRANSIENT[0][1]]).kind == "transient"
    for lines in ([], ["ZeroDivisionError: division by zero"], ["Killed"], ["KeyError: 'prompt'"]):
        assert classify_failure(lines).kind == "unknown"


def test_the_stderr_tail_passes_every_byte_through_and_keeps_the_lines(capfd):
    # tqdm's carriage returns, a long line, no newline at the end
    program = ("import sys; sys.stderr.write('step 1\\r step 2\\rdone\\n' + 'x' * 70000 + '\\nlast'); "
               "print('to stdout')")
    tail: collections.deque = collections.deque(maxlen=3)
    assert run_child([sys.executable, "-c", program], os.environ, tail=tail) == 0
    out, err = capfd.readouterr()
    assert err == "step 1\r step 2\rdone\n" + "x" * 70000 + "\nlast" and out == "to stdout\n"
    assert list(tail) == ["step 1\r step 2\rdone", "x" * 2000, "last"]


def _entrypoint(tmp: Path, script: str) -> subprocess.CompletedProcess:
    child = tmp / "child.py"
    child.write_text(script)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HOME": str(tmp),
           "LAUNCHER_CHILD_CMD": f"{sys.executable} {child}", "LAUNCHER_ATTEMPT": "t1"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "launcher.entrypoint", "--config", str(standin_config(tmp))],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(240)
def test_a_configuration_error_is_not_trained_again(tmp_path):
    hydra = ("import sys; print('trainer started', flush=True); "
             "sys.stderr.write(\"Could not override 'actor_rollout_ref.actor.no_such_key'.\\n"
             "Key 'no_such_key' is not in struct\\n\"); sys.exit(1)")
    first = _entrypoint(tmp_path, hydra)
    assert first.returncode == 1 and "trainer started" in first.stdout
    assert "Could not override 'actor_rollout_ref.actor.no_such_key'." in first.stderr  # passed through
    assert ("[entrypoint] verl failed: config (Hydra override: Could not override "
            "'actor_rollout_ref.actor.no_such_key'.); a retry cannot fix a configuration") in first.stderr
    marker = Path(load_spec(standin_config(tmp_path)).checkpoint_path) / "launcher-config-error.json"
    assert json.loads(marker.read_text())["attempt"] == 1
    # the operator's retry: the same run starts again and stops before the trainer
    again = _entrypoint(tmp_path, hydra)
    assert again.returncode == 2 and "trainer started" not in again.stdout, again
    assert "[entrypoint] attempt 2: starting fresh" in again.stderr
    assert ("[entrypoint] not training: attempt 1 failed with a configuration error (Hydra override: Could not "
            "override 'actor_rollout_ref.actor.no_such_key'.); a retry cannot fix it") in again.stderr


@pytest.mark.timeout(240)
def test_a_transient_failure_is_retried(tmp_path):
    nccl = ("import sys; print('trainer started', flush=True); "
            f"sys.stderr.write({TRANSIENT[0][1]!r} + '\\n'); sys.exit(1)")
    first = _entrypoint(tmp_path, nccl)
    assert first.returncode == 1
    assert "[entrypoint] verl failed: transient (NCCL timeout: " in first.stderr
    assert "run_policy.backoff_limit is 0: no restart" in first.stderr
    again = _entrypoint(tmp_path, nccl)
    assert again.returncode == 1 and "trainer started" in again.stdout  # trained again
    assert not (Path(load_spec(standin_config(tmp_path)).checkpoint_path) / "launcher-config-error.json").exists()
