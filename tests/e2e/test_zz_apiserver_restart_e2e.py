"""The API server itself restarted (SIGKILL, then started again) in the middle of `submit --follow`.

Named to run last among the end-to-end tests: it takes the shared control plane down for a few
seconds (`_restore_cluster` brings back anything that died with it, operators included).
"""
from __future__ import annotations

import os
import signal
import time

import pytest

import kwok_support as ks
from launcher_helpers import (expected_rows, job_name, launcher, raw_lines, rows, serve_run, submit_args,
                              verl_lines, wait_file_rows)
from test_faults_e2e import KWOK_CLUSTER, STEPS, _alive, _restore_cluster

pytestmark = pytest.mark.cluster


def test_api_server_restart_during_follow(kube_cluster, namespace, tmp_path):
    """Kill kube-apiserver (SIGKILL, as a crash) in the middle of `submit --follow`, keep it down for a few
    seconds while the log grows, then start it again with kwokctl's own command line."""
    ns, runs = namespace, tmp_path / "runs"
    pid_file = KWOK_CLUSTER / "pids" / "kube-apiserver.pid"
    assert pid_file.exists() and (KWOK_CLUSTER / "kwok.yaml").exists(), f"no kwokctl state under {KWOK_CLUSTER}"
    delay = "40s"
    job = job_name(ns, STEPS, delay)
    lines = verl_lines(STEPS, seed=9)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=20)
    live = served.start(interval=0.6)
    pid = int(pid_file.read_text().strip())
    try:
        proc = launcher(submit_args(ns, STEPS, delay, "--follow"), kube_cluster, runs)
        wait_file_rows(runs / job, 3, timeout=60)
        os.kill(pid, signal.SIGKILL)
        ks.wait_for(lambda: not _alive(pid), 30, what="apiserver exit")
        time.sleep(4)  # the follower sees connection refused while it is down; lines keep arriving
        _restore_cluster(kube_cluster)
        out, err = proc.communicate(timeout=240)
    finally:
        live.stop()
        _restore_cluster(kube_cluster)  # never leave the shared cluster without its control plane
    assert proc.returncode == 0, err[-3000:]
    assert "API server unavailable" in err and "reachable again" in err
    assert raw_lines(runs / job / "logs" / f"{job}-master-0.log") == lines
    assert rows(runs / job) == expected_rows(STEPS, seed=9)
