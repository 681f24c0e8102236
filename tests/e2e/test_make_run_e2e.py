"""`make run` itself, end to end on the embedded cluster's real node: real training of grpo-exp3-cpu, and a report that
says so (hack/run-main-job.sh's real path, not only its prerequisite check).

It runs the README's command with KUBECONFIG unset, as a newcomer would: its builds are no-ops here (`make test`
built the control plane, the real node and the CPU image first) and its `cluster-up` finds the running cluster.
The run directory is the checkout's `runs/<job>/`, as `make run` writes it.

This is also the suite's one run of the whole experiment (25 steps, one node; issue 43's scenarios): `CONFIG=` is
grpo-exp3-cpu with the test's namespace and a volume that outlives the pods (verl's file logger, Hydra config and
checkpoint), so the checks of tests/e2e/test_real_training_e2e.py (`check_real_training`) and `launcher eval` of its
checkpoint read this run instead of starting another. What `CONFIG=` leaves untested is the default's choice of
configs/grpo-exp3-cpu.yaml and its banner (one `if` in hack/run-main-job.sh).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import kwok_support as ks
from real_runs import CLAIM, CONFIG, DEADLINE_S
from real_runs import real_node, volume  # noqa: F401 (fixtures)
from test_real_training_e2e import check_real_training, eval_of_the_real_checkpoint

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]

STEPS = 25  # grpo-exp3-cpu's own


def test_make_run_trains_grpo_exp3_cpu_for_real(real_node, namespace, volume, tmp_path):
    from launcher.spec.load import load_spec

    config = tmp_path / "grpo-exp3-cpu-here.yaml"  # the main job, in this test's namespace, on a volume
    config.write_text(f"base: {CONFIG}\nscheduling: {{namespace: {namespace}}}\nstorage: {{claim_name: {CLAIM}}}\n"
                      f"run_policy: {{active_deadline_seconds: {DEADLINE_S}}}\n")
    spec = load_spec(str(config))
    assert spec.trainer.total_training_steps == STEPS and spec.resources.nodes == 1, "grpo-exp3-cpu changed"
    job = spec.job_name
    runs = ks.REPO_ROOT / "runs"
    run = runs / job
    before = set(runs.iterdir()) if runs.is_dir() else set()
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "MAKEFLAGS", "MAKELEVEL", "GRPO_RUN_MODE", "GRPO_TIMINGS_FILE")}
    try:
        p = subprocess.run(["make", "-s", "run", f"CONFIG={config}"], cwd=ks.REPO_ROOT, env=env, capture_output=True,
                           text=True, timeout=3600)
        assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        out = p.stdout + p.stderr
        assert "SIMULATED" not in out, out[-3000:]
        # the follower says it as the pod starts, on a real node
        assert "on real node grpo-node-" in out and ": Real training (tiny model on CPU)" in out, out[-3000:]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
        md = (run / "report.md").read_text()
        assert md.splitlines()[0].startswith("# Real training (tiny model on CPU)"), md.splitlines()[0]
        report = json.loads((run / "report.json").read_text())
        assert report["execution"]["simulated"] is False
        assert list(run.glob("*.png")), sorted(p.name for p in run.iterdir())  # the report's plots
        # the whole experiment, judged by what verl recorded; then `launcher eval` of its real checkpoint (issue 29)
        check_real_training(real_node, namespace, runs, spec, volume, STEPS, 1)
        eval_of_the_real_checkpoint(real_node, namespace, runs, config, spec, volume, STEPS)
    finally:  # the run's and its eval's directories (the namespace fixture records the jobs, then deletes them)
        for made in (set(runs.iterdir()) if runs.is_dir() else set()) - before:
            shutil.rmtree(made, ignore_errors=True)
