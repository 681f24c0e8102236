"""kubectl habits against the real control plane: `submit --follow` on a terminal (a pty) shows the progress
line and a step table, not raw lines, while the raw log is saved whole; `status/list/wait -o json|yaml`;
`list -A` across namespaces; `wait --timeout` exits 124 on a running job; `logs -f | head` ends at once, 141."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import termios
import time
import uuid

import pytest
import yaml

import kwok_support as ks
from launcher_helpers import (PY, REPO, expected_rows, job_name, raw_lines, rows, run_launcher, serve_run,
                              submit_args, verl_lines)

pytestmark = pytest.mark.cluster


def env_for(info: ks.ClusterInfo, runs) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(info.kubeconfig), LAUNCHER_RUNS_DIR=str(runs), PYTHONPATH=str(REPO / "src"),
               TERM="xterm-256color", COLUMNS="160", LINES="50")
    return env


def run_in_pty(args: list[str], env: dict, timeout: float) -> tuple[int, str, str]:
    """Run the launcher with stdout on a pseudo-terminal (as in a user's shell); stderr is a pipe."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    p = subprocess.Popen([PY, "-m", "launcher", *args], stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         env=env, text=True)
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        screen += data
    os.close(master)
    _, err = p.communicate(timeout=max(deadline - time.monotonic(), 5))
    return p.returncode, screen.decode("utf-8", "replace"), err


def test_follow_on_a_terminal_shows_a_table_and_o_json_verbs(kube_cluster, namespace, tmp_path):
    ns, runs, steps, delay = namespace, tmp_path / "runs", 6, "15s"
    job = job_name(ns, steps, delay)
    lines = verl_lines(steps, seed=5)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=20)
    live = served.start(interval=0.2)
    try:
        rc, screen, err = run_in_pty(submit_args(ns, steps, delay, "--follow"), env_for(kube_cluster, runs), 150)
    finally:
        live.stop()
    assert rc == 0, err[-3000:]
    assert f"submitted PyTorchJob {job}" in screen
    # the step table and the progress line, not the raw lines
    assert "resp len" in screen and "tok/s" in screen and f"step {steps}/{steps}" in screen, screen[-3000:]
    # no raw log line. A pod's notices are not raw lines: `[master-0] on KWOK fake node ...: Simulated trainer ...`
    # goes to stderr, or above the table while it is live (rich redirects stderr there)
    assert not [ln for ln in lines if ln.strip() and f"[master-0] {ln}" in screen] and "step:1 - " not in screen
    assert "[master-0] on KWOK fake node" in screen + err
    run = runs / job
    assert raw_lines(run / "logs" / f"{job}-master-0.log") == lines  # every raw line still saved
    assert rows(run) == expected_rows(steps, seed=5)
    assert "run succeeded" in err

    rc, out, err = run_launcher(["status", job, "-n", ns, "-o", "json"], kube_cluster, runs)
    assert rc == 0, err
    st = json.loads(out)
    assert (st["kind"], st["name"], st["namespace"], st["jobKind"], st["experiment"]) == (
        "Run", job, ns, "PyTorchJob", "grpo-exp3")
    assert st["state"]["phase"] == "Succeeded" and st["state"]["finished"] and st["state"]["succeeded"]
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in st["conditions"])
    assert all(p["role"] == "master-0" for p in st["pods"])

    rc, out, err = run_launcher(["list", "-n", ns, "-o", "yaml"], kube_cluster, runs)
    assert rc == 0, err
    doc = yaml.safe_load(out)
    assert doc["kind"] == "RunList" and [(i["name"], i["state"]["phase"]) for i in doc["items"]] == [(job, "Succeeded")]

    rc, out, err = run_launcher(["wait", job, "-n", ns, "-o", "json", "--timeout", "20"], kube_cluster, runs)
    assert rc == 0, err
    w = json.loads(out)
    assert (w["name"], w["result"], w["exitCode"], w["state"]["phase"]) == (job, "succeeded", 0, "Succeeded")


def test_list_all_namespaces(kube_cluster, namespace, tmp_path):
    other = f"e2e-list-a-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", other)
    kube_cluster.kubectl("label", "namespace", other, f"{ks.E2E_NAMESPACE_LABEL}={other}")
    try:
        ks.wait_for(lambda: kube_cluster.kubectl("-n", other, "get", "serviceaccount", "default", check=False)
                    .returncode == 0, timeout=60, what=f"serviceaccount default in {other}")
        jobs = {}
        for ns in (namespace, other):
            rc, out, err = run_launcher(submit_args(ns, 2, "120s"), kube_cluster, tmp_path / "runs")
            assert rc == 0, err
            jobs[ns] = job_name(ns, 2, "120s")
        rc, out, err = run_launcher(["list", "-A"], kube_cluster, tmp_path / "runs")
        assert rc == 0, err
        table = [ln.split() for ln in out.splitlines()]
        assert table[0] == ["NAMESPACE", "NAME", "BACKEND", "STATE", "AGE", "EXPERIMENT"]
        for ns, job in jobs.items():
            assert any(r[:3] == [ns, job, "pytorchjob"] for r in table[1:]), out
        rc, out, err = run_launcher(["list", "-A", "-o", "json", "-e", "grpo-exp3"], kube_cluster, tmp_path / "runs")
        assert rc == 0, err
        items = {(i["namespace"], i["name"]) for i in json.loads(out)["items"]}
        assert set(jobs.items()) <= items
        # without -A only the one namespace
        rc, out, err = run_launcher(["list", "-n", other, "-o", "json"], kube_cluster, tmp_path / "runs")
        assert [(i["namespace"], i["name"]) for i in json.loads(out)["items"]] == [(other, jobs[other])]
    finally:
        kube_cluster.kubectl("delete", "pytorchjobs", "--all", "-n", other, "--wait=true", check=False)
        kube_cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_wait_timeout_124_and_logs_follow_into_head_ends_at_once(kube_cluster, namespace, tmp_path):
    # the pod runs 10 minutes: neither verb can end because the job did; each must end on its own account
    ns, runs, steps, delay = namespace, tmp_path / "runs", 4, "600s"
    job = job_name(ns, steps, delay)
    lines = verl_lines(steps)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=5)
    rc, out, err = run_launcher(submit_args(ns, steps, delay), kube_cluster, runs)
    assert rc == 0, err
    rc, out, err = run_launcher(["wait", job, "-n", ns, "--timeout", "3", "-o", "json"], kube_cluster, runs)
    assert rc == 124, err
    w = json.loads(out)
    assert w["result"] == "timeout" and w["exitCode"] == 124 and not w["state"]["finished"]
    assert "timed out after 3s" in err

    live = served.start(interval=0.2)  # lines keep coming: the writes after head left hit the closed pipe
    try:
        # the subprocess timeout only turns a hang into a failure; the job's 600 s are the real bound
        p = subprocess.run(["bash", "-c", f"set -o pipefail; {PY} -m launcher logs -f {job} -n {ns} | head -n 1"],
                           capture_output=True, text=True, env=env_for(kube_cluster, runs), timeout=300)
        # ended because its reader left, not because the job did: the job is still running now
        rc, out, err = run_launcher(["wait", job, "-n", ns, "--timeout", "1", "-o", "json"], kube_cluster, runs)
    finally:
        live.stop()
    assert p.returncode == 141, p.stderr
    assert p.stdout.startswith("[master-0] ") and p.stdout.count("\n") == 1
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
    assert rc == 124 and not json.loads(out)["state"]["finished"], (rc, out, err)
    # what was read was saved, from the first line on
    assert raw_lines(runs / job / "logs" / f"{job}-master-0.log")[:5] == lines[:5]
