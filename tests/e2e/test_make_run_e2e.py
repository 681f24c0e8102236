"""`make run` itself, end to end on the embedded cluster's real node: real training of grpo-exp3-cpu, and a report that
says so (hack/run-main-job.sh's real path, not only its prerequisite check).

It runs the README's command with KUBECONFIG unset, as a newcomer would: its builds are no-ops here (`make test`
built the control plane, the real node and the CPU image first) and its `cluster-up` finds the running cluster.
The run directory is the checkout's `runs/<job>/`, as `make run` writes it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import kwok_support as ks
import real_run_ledger
import realnode as rn

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


def test_make_run_trains_grpo_exp3_cpu_for_real(kube_cluster):
    rn.ensure_real_node(kube_cluster)
    from launcher.spec.load import load_spec

    spec = load_spec(str(ks.REPO_ROOT / "configs" / "grpo-exp3-cpu.yaml"))
    job = spec.job_name
    run = ks.REPO_ROOT / "runs" / job
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "MAKEFLAGS", "MAKELEVEL", "GRPO_RUN_MODE", "GRPO_TIMINGS_FILE")}
    try:
        p = subprocess.run(["make", "-s", "run"], cwd=ks.REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=3600)
        assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        out = p.stdout + p.stderr
        assert "== Real training (tiny model on CPU)" in out and "SIMULATED" not in out, out[-3000:]
        # the follower says it as the pod starts, on a real node
        assert "on real node grpo-node-" in out and ": Real training (tiny model on CPU)" in out, out[-3000:]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, 26))
        md = (run / "report.md").read_text()
        assert md.splitlines()[0].startswith("# Real training (tiny model on CPU)"), md.splitlines()[0]
        report = json.loads((run / "report.json").read_text())
        assert report["execution"]["simulated"] is False
        assert list(run.glob("*.png")), sorted(p.name for p in run.iterdir())  # the report's plots
    finally:
        try:  # it has no test namespace for the fixture to record; the ledger reports, it must not fail the test
            real_run_ledger.record(kube_cluster.api_client(), spec.scheduling.namespace, "make run", job)
        except Exception as exc:
            print(f"real-run ledger: make run's {job} not recorded: {exc}")
        subprocess.run([str(ks.REPO_ROOT / ".venv" / "bin" / "python"), "-m", "launcher", "delete", job],
                       cwd=ks.REPO_ROOT, env={**env, "KUBECONFIG": str(kube_cluster.kubeconfig)},
                       capture_output=True, timeout=300)
        shutil.rmtree(run, ignore_errors=True)
