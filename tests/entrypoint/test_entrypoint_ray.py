"""The multi-node bootstrap with real Ray on this machine's CPUs (no GPUs: `--num-gpus` is logical).

Two `python -m launcher.entrypoint` processes play the PyTorchJob's master (RANK=0) and worker
(RANK=1) pods on 127.0.0.1; a stand-in trainer replaces verl. Needs `ray[default]==2.60.0`.
Every Ray process started here is found by its unique temp dir and killed at the end, pass or fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from entrypoint_support import cluster_dir, free_port, standin_config  # noqa: F401 - cluster_dir: kills our Ray processes

# Real Ray comes with the verl test environment (requirements/verl-test.txt).
pytestmark = pytest.mark.verl


@pytest.fixture(autouse=True, scope="module")
def _real_ray():
    import ray  # noqa: F401 - a missing Ray must fail these tests (`make verl-env`), not skip them

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "fixtures" / "entrypoint" / "trainer_standin.py"
JOB = "grpo-t-0123abcd"


def _pod(config: Path, tmp: Path, *, rank: int, port: int, child: str, extra: dict | None = None) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "HOME": str(tmp / f"home{rank}"),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "23456",
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "WORLD_SIZE": "2",
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "POD_NAME": f"{JOB}-master-0" if rank == 0 else f"{JOB}-worker-{rank - 1}",
        "LAUNCHER_RAY_PORT": str(port),
        "LAUNCHER_RAY_TEMP_DIR": str(tmp / "r"),
        "LAUNCHER_POLL_S": "0.5",
        "LAUNCHER_CHILD_CMD": child,
        "LAUNCHER_ATTEMPT": "test",
        # fixed default ports of the head's client server and dashboard: free ones, so runs can overlap
        "LAUNCHER_RAY_START_ARGS": f"--ray-client-server-port={free_port()} --dashboard-port={free_port()}"
        if rank == 0 else "",
        **(extra or {}),
    }
    env.pop("RAY_ADDRESS", None)
    (tmp / f"home{rank}").mkdir(exist_ok=True)
    log = open(tmp / f"rank{rank}.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "launcher.entrypoint", "--config", str(config)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def _wait(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.timeout(150)
def test_head_and_worker_run_trainer_and_propagate_its_status(cluster_dir):
    tmp, procs = cluster_dir
    config = standin_config(tmp, nodes=2)
    port = free_port()
    child = f"{sys.executable} {STANDIN} ray 7 4"  # exits 7 iff it sees 2 nodes × 2 GPUs
    start = time.monotonic()
    head = _pod(config, tmp, rank=0, port=port, child=child)
    worker = _pod(config, tmp, rank=1, port=port, child="false")
    procs += [head, worker]
    head_rc = _wait(head, 120)
    worker_rc = _wait(worker, 30)
    elapsed = time.monotonic() - start
    head_log = (tmp / "rank0.log").read_text(errors="replace")
    worker_log = (tmp / "rank1.log").read_text(errors="replace")
    print(f"elapsed {elapsed:.1f}s\n--- head\n{head_log}\n--- worker\n{worker_log}")
    assert head_rc == 7, head_log
    assert worker_rc == 7, worker_log
    assert "Ray cluster complete: 2 node(s)" in head_log
    assert "GPU=4" in head_log  # the trainer attached to the 2-pod cluster through RAY_ADDRESS
    assert "the master's verl exited with status 7" in worker_log
    assert "role=ray-head" in head_log and "role=ray-worker" in worker_log


@pytest.mark.timeout(180)
def test_head_names_the_missing_worker_pod_after_the_timeout(cluster_dir):
    tmp, procs = cluster_dir
    config = standin_config(tmp, nodes=2)
    port = free_port()
    start = time.monotonic()
    head = _pod(config, tmp, rank=0, port=port, child=f"{sys.executable} {STANDIN} exit 0",
                # 45 s: on a loaded 2-core machine the head's own raylet can take 20 s to register
                extra={"LAUNCHER_NODE_WAIT_S": "45", "LAUNCHER_ACK_WAIT_S": "2"})
    procs.append(head)
    rc = _wait(head, 150)
    elapsed = time.monotonic() - start
    log = (tmp / "rank0.log").read_text(errors="replace")
    print(f"elapsed {elapsed:.1f}s\n{log}")
    assert rc == 1, log
    assert f"missing: {JOB}-worker-0 (rank 1)" in log
    assert "Ray cluster incomplete after 45s: 1 of 2 node(s)" in log
    assert "stand-in trainer" not in log  # the trainer never started


def _pids_matching(*needles: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if all(n in cmd for n in needles):
            out.append(int(proc.name))
    return out


@pytest.mark.timeout(150)
def test_worker_exits_nonzero_when_the_head_pod_dies_without_a_status(cluster_dir):
    tmp, procs = cluster_dir
    config = standin_config(tmp, nodes=2)
    port = free_port()
    head = _pod(config, tmp, rank=0, port=port, child=f"{sys.executable} {STANDIN} trap")
    worker = _pod(config, tmp, rank=1, port=port, child="false", extra={"LAUNCHER_HEAD_LOST_S": "5"})
    procs += [head, worker]
    while "\nready\n" not in (tmp / "rank0.log").read_text(errors="replace"):  # the trainer runs (a hang: the mark)
        assert head.poll() is None, (tmp / "rank0.log").read_text()
        time.sleep(0.5)
    # The master pod dies at once (node failure): entrypoint, trainer and Ray head, no exit status published.
    killed = time.monotonic()
    for pid in [head.pid, *_pids_matching("ray", "start", "--head", f"--port={port}"),
                *_pids_matching(str(STANDIN), "trap")]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    rc = _wait(worker, 90)
    took = time.monotonic() - killed
    log = (tmp / "rank1.log").read_text(errors="replace")
    print(f"worker exited {took:.1f}s after the head died\n{log}")
    assert rc == 1, log
    assert "no exit status" in log or "never published an exit status" in log
    assert "the master's verl exited" not in log


class _Gcs:
    """The head's GCS as the worker sees it: reachable, an exit status published once `publish_after` polls passed."""

    address = "head:6379"

    def __init__(self, publish_after: int | None):
        self.polls, self.publish_after, self.acked = 0, publish_after, []

    def reachable(self) -> bool:
        return True

    def get(self, key: bytes) -> bytes | None:
        self.polls += 1
        return b"0" if self.publish_after is not None and self.polls > self.publish_after else None

    def put(self, key: bytes, value: bytes) -> None:
        self.acked.append(key)


class _Raylet:
    """`ray start --block` as a Child: each start ends with the next status of `ends` (None: keeps running)."""

    argv = ["ray", "start"]

    def __init__(self, ends: list[int | None]):
        self.ends, self.starts, self.stops, self.status = list(ends), 0, 0, None

    def start(self):
        self.starts += 1
        self.status = self.ends.pop(0)
        return self

    def poll(self):
        return self.status

    def stop(self, timeout=None):
        self.stops += 1
        return self.status or 0

    def wait(self, timeout=None):
        return self.status


@pytest.mark.parametrize("ends,publish_after,code,starts", [
    ([1, None], 3, 0, 2),        # missed Ray's 30 s once: started again, then the master's status
    ([1, 1, None], 5, 0, 3),     # twice: the third of the three attempts joins
    ([1, 1, 1], None, 1, 3),     # every attempt failed: the pod fails, naming it
    ([0], None, 1, 1),           # a raylet that ended cleanly is not retried
])
def test_a_worker_whose_raylet_missed_its_start_up_starts_it_again(monkeypatch, ends, publish_after, code, starts):
    from launcher.entrypoint import ray_cluster as RC
    from launcher.entrypoint.runner import SignalState

    said: list[str] = []
    monkeypatch.setattr(RC, "log", said.append)
    monkeypatch.setattr(RC.time, "sleep", lambda s: None)
    raylet, gcs = _Raylet(ends), _Gcs(publish_after)
    topo = RC.Topology(rank=1, nnodes=2, master_addr="head", job_name="j")
    settings = RC.BootstrapSettings(poll_s=0.0)
    assert RC._worker_phase(topo, settings, gcs, raylet, SignalState()) == code, said
    assert raylet.starts == starts and raylet.stops == starts - 1, said
    assert sum("starting it again" in m for m in said) == starts - 1, said
