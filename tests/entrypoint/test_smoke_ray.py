"""The smoke workload for real on this machine's CPUs: the entrypoint, a local Ray (or two raylets), gloo.

`python -m launcher.entrypoint` runs as a pod would (data prepared from the GSM8K fixture, the smoke
workload as its child), with configs/smoke-cpu.yaml's values and paths moved under a temp dir. The
root filesystem is not read-only here and the tests may run as root, so `root_readonly` is relaxed
in the config and `user` is expected to fail unless the test runs as 1000:1000.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from launcher.metrics import LogParser
from entrypoint_support import IDENTITY_FAILS, free_port, smoke_config, smoke_env, start_entrypoint
from entrypoint_support import cluster_dir  # noqa: F401 - the fixture that kills our Ray processes, pass or fail

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]


def _failed(log: str) -> set[str]:
    line = next(ln for ln in log.splitlines() if ln.startswith("[smoke] result "))
    return set() if line == "[smoke] result ok" else set(line.split(" ", 3)[3].split(","))


def _checks(log: str) -> dict[str, str]:
    out = {}
    for ln in log.splitlines():
        if ln.startswith("[smoke] check "):
            _, _, name, verdict = ln.split(" ", 4)[:4]
            out[name] = verdict
    return out


def _rows(log: str) -> list:
    parser = LogParser()
    return parser.feed(log.encode()) + parser.finish()


@pytest.mark.timeout(240)
def test_single_node_smoke_runs_every_check_and_logs_metric_lines(cluster_dir):
    tmp, procs = cluster_dir
    config = smoke_config(tmp, steps=2, log_lines_per_step=2, memory_mb=32)
    proc = start_entrypoint(config, smoke_env(tmp, MASTER_PORT=str(free_port()), LAUNCHER_RAY_TEMP_DIR=str(tmp / "r")),
                  tmp / "pod.log")
    procs.append(proc)
    rc = proc.wait(timeout=220)
    log = (tmp / "pod.log").read_text(errors="replace")
    print(log)
    checks = _checks(log)
    for name in ("root_readonly", "writable:tmp", "writable:home", "writable:shm", "writable:storage", "shm_size",
                 "dataset", "rendezvous", "allreduce", "verl_config", "ray_init", "ray_nodes", "memory", "steps"):
        assert checks.get(name) == "ok", (name, checks)
    assert any(n.startswith("ray_task@") and v == "ok" for n, v in checks.items())
    assert _failed(log) == ({"user"} if IDENTITY_FAILS else set())
    assert rc == (1 if IDENTITY_FAILS else 0)
    rows = _rows(log)
    assert [r.step for r in rows] == [1, 2]
    for r in rows:
        assert set(r.metrics) == {"smoke/allreduce_ms", "smoke/ray_task_ms", "smoke/world_size", "timing_s/step"}
        assert r.metrics["smoke/world_size"] == 1 and r.metrics["timing_s/step"] >= 0.2
    assert log.count("[smoke] pad step=") == 4


@pytest.mark.timeout(240)
def test_sigterm_reaches_the_smoke_and_the_pod_exits_143(cluster_dir):
    tmp, procs = cluster_dir
    config = smoke_config(tmp, steps=10_000, step_seconds=0.5)
    proc = start_entrypoint(config, smoke_env(tmp, MASTER_PORT=str(free_port())), tmp / "pod.log")
    procs.append(proc)
    while "\nstep:1 " not in (tmp / "pod.log").read_text(errors="replace"):  # a hang: the timeout mark ends it
        assert proc.poll() is None, (tmp / "pod.log").read_text()
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # kubelet stopping the pod: tini forwards it to the entrypoint
    rc = proc.wait(timeout=30)
    log = (tmp / "pod.log").read_text(errors="replace")
    print(log)
    assert rc == 143
    assert "[smoke] received signal 15; exiting with status 143" in log
    assert "the smoke workload exited with status 143" in log


@pytest.mark.timeout(300)
def test_two_pod_pytorchjob_smoke_all_reduces_across_both_pods(cluster_dir):
    """Master (RANK 0: Ray head, smoke driver) and worker (RANK 1: raylet + smoke participant) on 127.0.0.1."""
    tmp, procs = cluster_dir
    config = smoke_config(tmp, nodes=2, steps=2)
    ray_port, master_port = free_port(), free_port()
    job = "smoke-t-0123abcd"
    common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port), "WORLD_SIZE": "2", "PET_NNODES": "2",
              "LAUNCHER_RAY_PORT": str(ray_port), "LAUNCHER_RAY_TEMP_DIR": str(tmp / "r"), "LAUNCHER_POLL_S": "0.5"}
    head = start_entrypoint(config, smoke_env(tmp, 0, **common, RANK="0", PET_NODE_RANK="0", POD_NAME=f"{job}-master-0",
                               LAUNCHER_RAY_START_ARGS=f"--ray-client-server-port={free_port()} "
                                                       f"--dashboard-port={free_port()}"), tmp / "rank0.log")
    worker = start_entrypoint(config, smoke_env(tmp, 1, **common, RANK="1", PET_NODE_RANK="1", POD_NAME=f"{job}-worker-0"),
                    tmp / "rank1.log")
    procs += [head, worker]
    head_rc, worker_rc = head.wait(timeout=270), worker.wait(timeout=60)
    head_log = (tmp / "rank0.log").read_text(errors="replace")
    worker_log = (tmp / "rank1.log").read_text(errors="replace")
    print(f"--- head\n{head_log}\n--- worker\n{worker_log}")
    # the head also ran the pod checks on the worker's node, through a pinned Ray task (same host name here)
    assert _failed(head_log) == ({"user", f"user@{socket.gethostname()}"} if IDENTITY_FAILS else set())
    assert _failed(worker_log) == ({"user"} if IDENTITY_FAILS else set())
    assert head_rc == worker_rc == (1 if IDENTITY_FAILS else 0)
    checks = _checks(head_log)
    assert checks["rendezvous"] == checks["allreduce"] == checks["ray_nodes"] == checks["steps"] == "ok"
    assert "gloo, 2 rank(s): 3 (expected 3)" in head_log
    assert "check ray_nodes ok 2 alive, expected 2 (resources.nodes)" in head_log
    assert _checks(worker_log)["steps"] == "ok" and "gloo rank 1 of 2" in worker_log
    assert "companion exited with status" in worker_log
    assert [r.step for r in _rows(head_log)] == [1, 2] and _rows(worker_log) == []
    assert all(r.metrics["smoke/world_size"] == 2 for r in _rows(head_log))


@pytest.mark.timeout(300)
def test_two_pod_trainjob_smoke_all_reduces_from_trainer_v2_variables_only(cluster_dir):
    """A TrainJob's two node pods: only Kubeflow Trainer v2's PET_* variables (no MASTER_ADDR/RANK/WORLD_SIZE),
    PET_NODE_RANK as the Indexed Job's completion index; the same Ray cluster and gloo group as a PyTorchJob's."""
    tmp, procs = cluster_dir
    config = smoke_config(tmp, nodes=2, steps=2)
    raw = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**raw, "backend": "trainjob"}))
    ray_port, master_port = free_port(), free_port()
    job = "smoke-t-0123abcd"
    common = {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(master_port), "PET_NNODES": "2",
              "PET_NPROC_PER_NODE": "1", "LAUNCHER_RAY_PORT": str(ray_port), "LAUNCHER_RAY_TEMP_DIR": str(tmp / "r"),
              "LAUNCHER_POLL_S": "0.5"}
    head = start_entrypoint(config, smoke_env(tmp, 0, **common, PET_NODE_RANK="0", POD_NAME=f"{job}-node-0-0-aaaaa",
                               LAUNCHER_RAY_START_ARGS=f"--ray-client-server-port={free_port()} "
                                                       f"--dashboard-port={free_port()}"), tmp / "rank0.log")
    worker = start_entrypoint(config, smoke_env(tmp, 1, **common, PET_NODE_RANK="1", POD_NAME=f"{job}-node-0-1-bbbbb"),
                    tmp / "rank1.log")
    procs += [head, worker]
    head_rc, worker_rc = head.wait(timeout=270), worker.wait(timeout=60)
    head_log = (tmp / "rank0.log").read_text(errors="replace")
    worker_log = (tmp / "rank1.log").read_text(errors="replace")
    print(f"--- head\n{head_log}\n--- worker\n{worker_log}")
    assert _failed(head_log) == ({"user", f"user@{socket.gethostname()}"} if IDENTITY_FAILS else set())
    assert _failed(worker_log) == ({"user"} if IDENTITY_FAILS else set())
    assert head_rc == worker_rc == (1 if IDENTITY_FAILS else 0)
    checks = _checks(head_log)
    assert checks["rendezvous"] == checks["allreduce"] == checks["ray_nodes"] == checks["steps"] == "ok"
    assert f"via MASTER_ADDR:MASTER_PORT 127.0.0.1:{master_port}" in head_log  # PET_MASTER_* carried over
    assert "gloo, 2 rank(s): 3 (expected 3)" in head_log
    assert _checks(worker_log)["steps"] == "ok" and "gloo rank 1 of 2" in worker_log
    assert [r.step for r in _rows(head_log)] == [1, 2] and _rows(worker_log) == []


@pytest.mark.timeout(300)
def test_rayjob_driver_all_reduces_through_one_actor_per_worker_node(cluster_dir):
    """KubeRay's cluster played by `ray start` (a head and one worker raylet); the entrypoint is the job driver."""
    tmp, procs = cluster_dir
    config = smoke_config(tmp, nodes=1, steps=2)
    raw = yaml.safe_load(config.read_text())
    raw["backend"] = "rayjob"
    config.write_text(yaml.safe_dump(raw))
    port = free_port()
    ray = str(Path(sys.executable).parent / "ray")
    common = ["--num-cpus=1", "--num-gpus=0", "--disable-usage-stats", "--block"]
    head = subprocess.Popen([ray, "start", "--head", f"--port={port}", "--include-dashboard=false",
                             f"--temp-dir={tmp / 'r'}", f"--ray-client-server-port={free_port()}", *common],
                            env=smoke_env(tmp, 0, RAY_AUTH_MODE="disabled"), stdout=open(tmp / "head.log", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(head)
    while not _port_open(port):  # a hang: the timeout mark ends it
        assert head.poll() is None, (tmp / "head.log").read_text()
        time.sleep(0.5)
    worker = subprocess.Popen([ray, "start", f"--address=127.0.0.1:{port}", *common],
                              env=smoke_env(tmp, 1, RAY_AUTH_MODE="disabled"), stdout=open(tmp / "worker.log", "wb"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(worker)
    driver = start_entrypoint(config, smoke_env(tmp, 2, RAY_ADDRESS=f"127.0.0.1:{port}", RAY_AUTH_MODE="disabled"), tmp / "driver.log")
    procs.append(driver)
    rc = driver.wait(timeout=240)
    log = (tmp / "driver.log").read_text(errors="replace")
    print(log)
    checks = _checks(log)
    assert "role=ray-job-driver" in log
    assert "check ray_nodes ok 2 alive, expected 2 (resources.nodes + the RayJob head)" in log
    assert checks["rendezvous"] == checks["allreduce"] == checks["steps"] == "ok", checks
    assert "check rendezvous ok gloo across 1 worker node actor(s), master " in log
    # one pinned task per Ray node (both nodes are named after this machine here)
    assert sum(1 for ln in log.splitlines() if ln.startswith("[smoke] check ray_task@") and " ok " in ln) == 2
    assert _failed(log) == ({"user", f"user@{socket.gethostname()}"} if IDENTITY_FAILS else set())
    assert rc == (1 if IDENTITY_FAILS else 0)
    assert [r.step for r in _rows(log)] == [1, 2]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
