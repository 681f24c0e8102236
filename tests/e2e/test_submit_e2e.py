"""End-to-end on the local control plane: submit grpo-exp3, follow it to Succeeded, and metrics.jsonl
holds exactly the steps of the served verl log (simlog ground truth); plus status/list/wait/delete,
attach-on-resubmit, the RayJob submitter's log, and bad inputs that never reach the cluster."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import pytest

import kueue_support as kq
import kwok_support as ks
from launcher_helpers import (CONFIG, expected_rows, job_name, raw_lines, rows, run_launcher, serve_run,
                              submit_args, verl_lines)

pytestmark = pytest.mark.cluster
STEPS = 25


def test_submit_follow_pytorchjob_to_success_with_exact_metrics(kube_cluster, namespace, tmp_path):
    ns, runs = namespace, tmp_path / "runs"
    delay = "30s"
    job = job_name(ns, STEPS, delay)
    lines = verl_lines(STEPS)
    served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=20)
    live = served.start(interval=0.3)  # the rest arrives over ~10 s while the pod runs for 30 s
    try:
        rc, out, err = run_launcher(submit_args(ns, STEPS, delay, "--follow"), kube_cluster, runs, timeout=150)
    finally:
        live.stop()
    assert rc == 0, err[-3000:]
    assert f"submitted PyTorchJob {job}" in out
    run = runs / job
    assert rows(run) == expected_rows(STEPS)
    assert raw_lines(run / "logs" / f"{job}-master-0.log") == lines
    # every line printed once with its pod prefix (text-mode pipes turn verl's \r into \n)
    printed = "".join(ln + "\n" for ln in out.split("\n") if ln.startswith("[master-0] ") or "Training Progress" in ln)
    assert printed == "".join(f"[master-0] {ln}\n" for ln in lines).replace("\r", "\n")
    assert (run / "spec.yaml").is_file() and (run / "manifests.yaml").is_file()
    assert "run succeeded" in err

    # submitting the same config again attaches instead of creating a duplicate
    rc, out, err = run_launcher(submit_args(ns, STEPS, delay), kube_cluster, runs)
    assert rc == 0 and "already exists with this exact config: attaching" in err
    listed = kube_cluster.kubectl("-n", ns, "get", "pytorchjobs", "-o", "name").stdout.split()
    assert listed == [f"pytorchjob.kubeflow.org/{job}"]

    # a different config under the same experiment name is refused unless --new
    rc, out, err = run_launcher(submit_args(ns, STEPS, "31s"), kube_cluster, runs)
    assert rc == 2 and job in err and "--new" in err

    # status / list / wait on the finished run
    rc, out, err = run_launcher(["status", "grpo-exp3", "-n", ns], kube_cluster, runs)
    assert rc == 0 and f"PyTorchJob {job}" in out and "state: Succeeded" in out and "Succeeded" in out
    rc, out, err = run_launcher(["list", "-n", ns], kube_cluster, runs)
    assert rc == 0 and job in out and "Succeeded" in out and "grpo-exp3" in out
    rc, out, err = run_launcher(["wait", job, "-n", ns, "--timeout", "20"], kube_cluster, runs)
    assert rc == 0, err

    # logs (no -f) prints the saved log, complete, with the pod prefix, and re-reading duplicates nothing
    rc, out, err = run_launcher(["logs", job, "-n", ns], kube_cluster, runs)
    assert rc == 0
    assert raw_lines(run / "logs" / f"{job}-master-0.log") == lines

    # delete removes the job and its ConfigMap and waits for the pods
    rc, out, err = run_launcher(["delete", job, "-n", ns], kube_cluster, runs, timeout=120)
    assert rc == 0, err
    assert "all pods gone" in out
    assert kube_cluster.kubectl("-n", ns, "get", "pytorchjobs,configmaps,pods", "-l",
                                f"app.kubernetes.io/instance={job}", "-o", "name").stdout.strip() == ""


def test_failed_run_exit_1_with_reason(kube_cluster, namespace, tmp_path):
    ns, runs = namespace, tmp_path / "runs"
    ann = json.dumps({ks.POD_COMPLETE_DELAY: "8s", ks.POD_FAIL_EXIT_CODE: "3"})
    sets = ["--set", "trainer.total_training_steps=3", "--set", f"scheduling.pod_annotations={ann}"]
    from launcher.spec.load import load_spec

    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", "trainer.total_training_steps=3",
                             f"scheduling.pod_annotations={ann}"]).job_name
    lines = verl_lines(3)[:22] + ["Traceback (most recent call last):", "RuntimeError: CUDA error: out of memory"]
    serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=len(lines))
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, *sets, "--follow"], kube_cluster, runs, timeout=120)
    assert rc == 1, err
    assert "run failed: PyTorchJobFailed" in err
    # saved while the pods lived (the operator deletes a failed job's pods). The operator may create the
    # master pod more than once (same name, new uid); KWOK serves each the same file, so the raw log holds
    # that file once per pod instance, in order.
    state = json.loads((runs / job / "logs" / ".follow-state.json").read_text())
    uids = {k.split("/")[2] for k in state["streams"]}
    saved = raw_lines(runs / job / "logs" / f"{job}-master-0.log")
    assert saved == lines * len(uids), err
    assert [r["step"] for r in rows(runs / job)] == [1]
    rc, out, err = run_launcher(["wait", job, "-n", ns, "--timeout", "30"], kube_cluster, runs, timeout=60)
    assert rc == 1
    # from the pod if the operator has not deleted it yet, else from the saved log (" (saved)")
    assert "[master-0] RuntimeError: CUDA error: out of memory" in err
    assert f"{job} failed: PyTorchJobFailed" in err


def test_unschedulable_status_shows_scheduler_message(kube_cluster, namespace, tmp_path):
    ns, runs = namespace, tmp_path / "runs"
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, "--set", "resources.gpus_per_node=16",
                                 "--set", "data.train_batch_size=16", "--set", "actor.ppo_mini_batch_size=16",
                                 "--set", "actor.ppo_micro_batch_size_per_gpu=2"], kube_cluster, runs)
    assert rc == 0, err
    assert "warning: 0 node(s)" in err  # pre-flight saw no node with 16 GPUs, but did not refuse
    deadline = time.monotonic() + 60
    while True:
        rc, out, err = run_launcher(["status", "grpo-exp3", "-n", ns], kube_cluster, runs)
        if "Unschedulable" in out or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert rc == 0
    # every node refuses it: 3 KWOK nodes, plus the real nodes when they run (tainted, no GPU)
    assert re.search(r"! Unschedulable: 0/(\d+) nodes are available", out) and "Insufficient nvidia.com/gpu" in out, out
    assert "FailedScheduling" in out


def test_a_missing_local_queue_is_refused_before_creating_anything(kube_cluster, namespace, tmp_path):
    from launcher.kube import Kube
    from launcher.kube import kueue

    kq.ensure_kueue()  # the real Kueue serves its API; this namespace has no LocalQueue `gpus`
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, "--set", "scheduling.queue=gpus"],
                                kube_cluster, tmp_path / "runs")
    assert rc == 3, out + err
    version = kueue.served_version(Kube(kube_cluster.api_client(), namespace), "localqueues")
    assert err.strip() == (f"error: Kueue LocalQueue gpus does not exist in namespace {namespace} "
                           f"(kueue.x-k8s.io/{version}; kubectl get localqueues -n {namespace}); nothing was created")
    assert kube_cluster.kubectl("-n", namespace, "get", "configmaps,pytorchjobs", "-l",
                                "app.kubernetes.io/part-of=grpo-launcher", "-o", "name").stdout.strip() == ""


def test_server_dry_run_creates_nothing(kube_cluster, namespace, tmp_path):
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, "--dry-run=server"], kube_cluster, tmp_path)
    assert rc == 0, err
    assert "kind: PyTorchJob" in out and "kind: ConfigMap" in out and "uid:" in out  # the server filled it in
    assert kube_cluster.kubectl("-n", namespace, "get", "configmaps,pytorchjobs", "-l",
                                "app.kubernetes.io/part-of=grpo-launcher", "-o", "name").stdout.strip() == ""


def test_missing_namespace_and_unknown_name(kube_cluster, tmp_path):
    rc, out, err = run_launcher(["submit", CONFIG, "-n", "no-such-namespace-e2e"], kube_cluster, tmp_path)
    assert rc == 3 and err.strip().endswith("namespace no-such-namespace-e2e does not exist on "
                                            f"{kube_cluster.server}")
    rc, out, err = run_launcher(["status", "nope", "-n", "default"], kube_cluster, tmp_path)
    assert rc == 2 and err.strip().startswith("error: no run named 'nope' in namespace default")


def test_bad_input_never_connects(tmp_path):
    """Validation failures exit 2 without a single connection (a listening socket counts them)."""
    import os
    import sys

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.01)
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                              "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{srv.getsockname()[1]}"}}],
                              "users": [{"name": "u", "user": {"token": "t"}}],
                              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    env = {**os.environ, "KUBECONFIG": str(kc)}
    for extra in (["--set", "rollout.n=0"], ["--set", "bogus=1"], ["--backend", "mpi"], ["-n", "UPPER"]):
        p = subprocess.run([sys.executable, "-m", "launcher", "submit", CONFIG, *extra], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
    with pytest.raises(OSError):
        srv.accept()  # nobody ever connected
    srv.close()


def test_forbidden_service_account_token_gives_403_line(kube_cluster, namespace, tmp_path):
    ns = namespace
    kube_cluster.kubectl("-n", ns, "create", "serviceaccount", "nobody")
    token = kube_cluster.kubectl("-n", ns, "create", "token", "nobody").stdout.strip()
    cfg = kube_cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout
    cfg = json.loads(cfg)
    cluster = cfg["clusters"][0]
    kc = tmp_path / "sa-kubeconfig"
    kc.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "sa",
                              "clusters": [cluster], "users": [{"name": "sa", "user": {"token": token}}],
                              "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "sa",
                                                                      "namespace": ns}}]}))
    import os
    import sys

    env = {**os.environ, "KUBECONFIG": str(kc)}
    for argv, what in ((["list"], "list pytorchjobs"), (["status", "x"], "get PyTorchJob x"),
                       (["submit", CONFIG, "-n", ns], "")):
        p = subprocess.run([sys.executable, "-m", "launcher", *argv], env=env, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 3, (argv, p.stderr)
        errs = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
        assert len(errs) == 1 and "forbidden (403)" in errs[0] and what in errs[0], p.stderr
        assert token not in p.stderr and token not in p.stdout


def test_rayjob_follow_reads_the_submitter_pod(kube_cluster, namespace, tmp_path):
    """RayJob under KWOK: KubeRay creates the RayCluster and the submitter Job; the fake dashboard reports
    SUCCEEDED; the verl output is in the submitter pod's log. KWOK's ClusterLogs cannot target the
    generated pod names in advance, so every pod of the namespace serves the same verl log here."""
    ns, runs = namespace, tmp_path / "runs"
    steps = 6
    lines = verl_lines(steps, seed=3)
    from launcher_helpers import serve_namespace

    serve_namespace(kube_cluster, ns, lines)
    job = job_name(ns, steps, "20s", "backend=rayjob")
    rc, out, err = run_launcher(submit_args(ns, steps, "20s", "--backend", "rayjob", "--follow"), kube_cluster,
                                runs, timeout=240)
    assert rc == 0, err[-3000:]
    run = runs / job
    assert rows(run) == expected_rows(steps, seed=3)
    logs = sorted(p.name for p in (run / "logs").glob("*.log"))
    submitter = [n for n in logs if n.startswith(job + "-") and "-head-" not in n and "-worker-" not in n
                 and "raycluster" not in n]
    assert submitter, logs
    assert any("head" in n for n in logs), logs  # the Ray pods were followed too
    for n in logs:
        assert raw_lines(run / "logs" / n) == lines, n
    assert "[submitter] " in out
