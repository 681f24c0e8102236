"""End-to-end on the local cluster with the real Kubeflow Trainer v2 and JobSet controllers (backend trainjob).

The launcher creates a TrainingRuntime and a TrainJob; the real Trainer controller creates the JobSet, the real
JobSet controller the indexed Job, the Job controller the pods, the scheduler puts them on the KWOK A100 nodes
(two nodes: one pod each, by the pods' anti-affinity), KWOK runs them and serves the verl log. What is simulated:
the pods' containers (KWOK) and the verl log (simlog); the TrainJob/JobSet/Job lifecycles are real.
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import (CONFIG, expected_rows, raw_lines, rows, run_launcher, serve_namespace, verl_lines)

pytestmark = pytest.mark.cluster
STEPS = 12


def _sets(ns: str, delay: str, *extra: str) -> list[str]:
    ann = json.dumps({ks.POD_COMPLETE_DELAY: delay})
    return [f"scheduling.namespace={ns}", "backend=trainjob", f"trainer.total_training_steps={STEPS}",
            f"scheduling.pod_annotations={ann}", *extra]


def _args(sets: list[str]) -> list[str]:
    return [a for s in sets if not s.startswith("scheduling.namespace=") for a in ("--set", s)]


def _job(sets: list[str]) -> str:
    from launcher.spec.load import load_spec

    return load_spec(CONFIG, sets).job_name


def _pods(info, ns: str, job: str) -> list[dict]:
    out = info.kubectl("-n", ns, "get", "pods", "-l", f"jobset.sigs.k8s.io/jobset-name={job}", "-o", "json").stdout
    return json.loads(out)["items"]


def test_one_node_trainjob_follows_to_success_with_exact_metrics(trainer, namespace, tmp_path):
    info, ns, runs = trainer, namespace, tmp_path / "runs"
    sets = _sets(ns, "20s")
    job = _job(sets)
    lines = verl_lines(STEPS)
    serve_namespace(info, ns, lines)
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, *_args(sets), "--follow"], info, runs, timeout=180)
    assert rc == 0, err[-3000:]
    assert f"submitted TrainJob {job}" in out, out[-2000:]
    assert "run succeeded" in err, err[-2000:]
    run = runs / job
    assert rows(run) == expected_rows(STEPS)
    saved = sorted((run / "logs").glob("*.log"))
    assert len(saved) == 1, saved
    assert raw_lines(saved[0]) == lines

    # the real controllers made what the launcher asked for: runtime -> TrainJob -> JobSet -> Job -> pod
    tj = json.loads(info.kubectl("-n", ns, "get", "trainjobs.trainer.kubeflow.org", job, "-o", "json").stdout)
    assert tj["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": job}
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in tj["status"]["conditions"]), tj["status"]
    js = json.loads(info.kubectl("-n", ns, "get", "jobsets.jobset.x-k8s.io", job, "-o", "json").stdout)
    assert js["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    pods = _pods(info, ns, job)
    assert len(pods) == 1 and pods[0]["spec"]["nodeName"].startswith("kwok-a100-"), pods
    env = {e["name"]: e for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"]["value"] == "1" and env["PET_MASTER_ADDR"]["value"] == f"{job}-node-0-0.{job}"
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"

    rc, out, err = run_launcher(["status", job, "-n", ns], info, runs)
    assert rc == 0 and f"TrainJob {job}" in out and "Succeeded" in out, out + err
    assert f"jobset {job}" in out and "condition Completed=True" in out, out  # the JobSet's own condition
    rc, out, err = run_launcher(["list", "-n", ns], info, runs)
    assert rc == 0 and job in out and "Succeeded" in out and "trainjob" in out.lower(), out
    rc, out, err = run_launcher(["wait", job, "-n", ns, "--timeout", "20"], info, runs)
    assert rc == 0, err
    rc, out, err = run_launcher(["report", str(run)], info, runs)
    assert rc == 0 and (run / "report.md").is_file(), err

    # delete removes the TrainJob, its runtime and the ConfigMap; the JobSet and pods go with the TrainJob
    rc, out, err = run_launcher(["delete", job, "-n", ns], info, runs, timeout=120)
    assert rc == 0, err
    left = info.kubectl("-n", ns, "get", "trainjobs.trainer.kubeflow.org,trainingruntimes.trainer.kubeflow.org,"
                        "jobsets.jobset.x-k8s.io,configmaps,pods", "-l", f"app.kubernetes.io/instance={job}",
                        "-o", "name").stdout.strip()
    assert left == "", left
    assert _pods(info, ns, job) == []


def test_two_node_trainjob_spreads_over_two_gpu_nodes_and_follows_every_pod(trainer, namespace, tmp_path):
    info, ns, runs = trainer, namespace, tmp_path / "runs"
    sets = _sets(ns, "20s", "resources.nodes=2")  # exp3's batch 8 x n 2 = 16 splits over 4 GPUs
    job = _job(sets)
    lines = verl_lines(STEPS)
    serve_namespace(info, ns, lines)  # both pods serve the verl log; rank 0's is the run's metrics
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, *_args(sets), "--follow"], info, runs, timeout=180)
    assert rc == 0, err[-3000:]
    pods = _pods(info, ns, job)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    assert {p["spec"]["nodeName"] for p in pods} == {"kwok-a100-0", "kwok-a100-1"}
    ranks = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert ranks == ["0", "1"]
    run = runs / job
    assert rows(run) == expected_rows(STEPS)
    saved = sorted((run / "logs").glob("*.log"))
    assert len(saved) == 2, saved  # one log per node's pod, each complete
    assert all(raw_lines(p) == lines for p in saved)


def test_failing_trainjob_pod_makes_wait_exit_1_with_the_reason(trainer, namespace, tmp_path):
    info, ns, runs = trainer, namespace, tmp_path / "runs"
    ann = json.dumps({ks.POD_COMPLETE_DELAY: "6s", ks.POD_FAIL_EXIT_CODE: "3"})
    sets = [s for s in _sets(ns, "6s") if not s.startswith("scheduling.pod_annotations=")]
    sets.append(f"scheduling.pod_annotations={ann}")
    job = _job(sets)
    serve_namespace(info, ns, verl_lines(3)[:22] + ["Traceback (most recent call last):",
                                                    "RuntimeError: CUDA error: out of memory"])
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, *_args(sets)], info, runs)
    assert rc == 0, err
    rc, out, err = run_launcher(["wait", job, "-n", ns, "--timeout", "150"], info, runs, timeout=200)
    assert rc == 1, out + err
    assert f"{job} failed" in err, err
    assert "RuntimeError: CUDA error: out of memory" in err, err
    tj = json.loads(info.kubectl("-n", ns, "get", "trainjobs.trainer.kubeflow.org", job, "-o", "json").stdout)
    failed = [c for c in tj["status"].get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"]
    assert failed and failed[0]["reason"] in err, (failed, err)
