"""Cluster verbs against a recording fake API server: exit codes, one-line errors, no request on bad input,
pre-flight checks, attach-instead-of-duplicate, refusal of a second config, rollback of a half-done submit."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_fakes import CLI_NS, FakeApiServer, cli_api  # noqa: F401 - cli_api: fixture `api`
from launcher.cli.main import main
from launcher.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
NS = CLI_NS
PTJ = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"
CM = f"/api/v1/namespaces/{NS}/configmaps"



def spec():
    return load_spec(CONFIG, [f"scheduling.namespace={NS}"])


def healthy(api: FakeApiServer, gpus: int = 8) -> None:
    api.routes[("GET", "/apis/kubeflow.org/v1")] = (200, {"resources": [{"name": "pytorchjobs"}]})
    api.routes[("GET", f"/api/v1/namespaces/{NS}")] = (200, {"metadata": {"name": NS}})
    api.routes[("GET", "/api/v1/nodes")] = (200, {"items": [
        {"metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
         "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}]})
    api.routes[("GET", PTJ)] = (200, {"items": []})
    api.routes[("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayjobs")] = (200, {"items": []})


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["submit", "configs/does-not-exist.yaml"],
    ["submit", CONFIG, "--set", "rollout.n=0"],
    ["submit", CONFIG, "--set", "data.train_batch_size=7"],
    ["submit", CONFIG, "--set", "nonsense.key=1"],
    ["submit", CONFIG, "--backend", "slurm"],
    ["submit", CONFIG, "-n", "Not_A_Namespace"],
    ["submit", CONFIG, "--dry-run=sever"],
])
def test_bad_input_exits_2_without_any_request(api, argv, capsys):
    assert main(argv) == 2
    assert api.connections == 0 and api.requests == []


def test_missing_crd_pytorchjob_exact_message(api, capsys):
    api.routes[("GET", f"/api/v1/namespaces/{NS}")] = (200, {})
    assert main(["submit", CONFIG, "-n", NS]) == 3
    assert one_line_error(capsys.readouterr().err) == (
        "error: Kubeflow Training Operator is not installed: no kubeflow.org/v1 PyTorchJob; the cluster serves no "
        "backend's API (PyTorchJob, RayJob, TrainJob); nothing was created")
    assert not [r for r in api.requests if r[0] == "POST"]


def test_missing_crd_rayjob_exact_message(api, capsys):
    assert main(["submit", CONFIG, "-n", NS, "--backend", "rayjob"]) == 3
    assert one_line_error(capsys.readouterr().err) == (
        "error: KubeRay is not installed: no ray.io/v1 RayJob; the cluster serves no backend's API "
        "(PyTorchJob, RayJob, TrainJob); nothing was created")


def test_missing_trainjob_crd_suggests_a_served_backend(api, capsys):
    api.routes[("GET", "/apis/kubeflow.org/v1")] = (200, {"resources": [{"name": "pytorchjobs"}]})
    assert main(["submit", CONFIG, "-n", NS, "--backend", "trainjob"]) == 3
    assert one_line_error(capsys.readouterr().err) == (
        "error: Kubeflow Trainer v2 is not installed: no trainer.kubeflow.org/v1alpha1 TrainJob and TrainingRuntime; "
        "the cluster serves: pytorchjob (PyTorchJob); use --backend pytorchjob; nothing was created")
    assert not [r for r in api.requests if r[0] == "POST"]


def test_missing_namespace(api, capsys):
    healthy(api)
    del api.routes[("GET", f"/api/v1/namespaces/{NS}")]
    assert main(["submit", CONFIG, "-n", NS]) == 3
    assert f"namespace {NS} does not exist" in one_line_error(capsys.readouterr().err)


def test_kueue_queue_checks(api, capsys):
    healthy(api)
    assert main(["submit", CONFIG, "-n", NS, "--set", "scheduling.queue=gpu-queue"]) == 3
    assert one_line_error(capsys.readouterr().err) == \
        "error: Kueue is not installed: no kueue.x-k8s.io (v1beta2/v1beta1) LocalQueue (scheduling.queue is gpu-queue)"
    api.routes[("GET", "/apis/kueue.x-k8s.io/v1beta1")] = (200, {"resources": [{"name": "localqueues"}]})
    assert main(["submit", CONFIG, "-n", NS, "--queue", "gpu-queue"]) == 3
    assert ("LocalQueue gpu-queue does not exist in namespace team-a (kueue.x-k8s.io/v1beta1; "
            "kubectl get localqueues -n team-a); nothing was created") in one_line_error(capsys.readouterr().err)
    assert not [r for r in api.requests if r[0] == "POST"]


@pytest.mark.parametrize(("served", "used"), [(("v1beta1",), "v1beta1"), (("v1beta2",), "v1beta2"),
                                              (("v1beta1", "v1beta2"), "v1beta2")])
def test_kueue_version_is_discovered_and_the_queue_read_at_it(api, capsys, served, used):
    healthy(api)
    for v in served:
        api.routes[("GET", f"/apis/kueue.x-k8s.io/{v}")] = (200, {"resources": [{"name": "localqueues"}]})
        api.routes[("GET", f"/apis/kueue.x-k8s.io/{v}/namespaces/{NS}/localqueues/gpu-queue")] = (
            200, {"metadata": {"name": "gpu-queue"}})
    api.routes[("POST", CM)] = (201, lambda q, b: json.loads(b))
    api.routes[("POST", PTJ)] = (201, lambda q, b: json.loads(b))
    assert main(["submit", CONFIG, "-n", NS, "--queue", "gpu-queue"]) == 0, capsys.readouterr().err
    reads = [r[1] for r in api.requests if r[0] == "GET" and "/localqueues/" in r[1]]
    assert reads == [f"/apis/kueue.x-k8s.io/{used}/namespaces/{NS}/localqueues/gpu-queue"]
    job = [json.loads(r[3]) for r in api.requests if r[0] == "POST" and r[1] == PTJ][0]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert job["spec"]["runPolicy"]["suspend"] is True


def test_submit_creates_configmap_then_job_and_writes_run_dir(api, capsys, tmp_path):
    healthy(api)
    s = spec()
    api.routes[("POST", CM)] = (201, lambda q, b: json.loads(b))
    api.routes[("POST", PTJ)] = (201, lambda q, b: json.loads(b))
    assert main(["submit", CONFIG, "-n", NS]) == 0
    posts = [(r[1], json.loads(r[3])["kind"]) for r in api.requests if r[0] == "POST"]
    assert posts == [(CM, "ConfigMap"), (PTJ, "PyTorchJob")]
    run = tmp_path / "runs" / s.job_name
    assert (run / "spec.yaml").is_file() and "kind: PyTorchJob" in (run / "manifests.yaml").read_text()
    out = capsys.readouterr()
    assert f"submitted PyTorchJob {s.job_name}" in out.out


def test_gpu_shortage_is_a_warning_not_an_error(api, capsys):
    healthy(api, gpus=1)
    api.routes[("POST", CM)] = (201, {})
    api.routes[("POST", PTJ)] = (201, {})
    assert main(["submit", CONFIG, "-n", NS]) == 0
    assert "warning: 0 node(s) match nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB with at least 2 nvidia.com/gpu" \
        in capsys.readouterr().err


def test_no_node_with_the_gpu_label_names_the_gpu_nodes_there_are(api, capsys):
    healthy(api)
    api.routes[("GET", "/api/v1/nodes")] = (200, {"items": [
        {"metadata": {"name": "n1", "labels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}},
         "status": {"allocatable": {"nvidia.com/gpu": "8"}}}]})
    api.routes[("POST", CM)] = (201, {})
    api.routes[("POST", PTJ)] = (201, {})
    assert main(["submit", CONFIG, "-n", NS, "--set", "resources.gpu_label_scheme=gke"]) == 0
    assert ("warning: no node matches cloud.google.com/gke-accelerator=nvidia-a100-80gb; nodes with nvidia.com/gpu: "
            "n1 (cloud.google.com/gke-accelerator=nvidia-h100-80gb, 8 nvidia.com/gpu)") in capsys.readouterr().err


def test_same_config_twice_attaches(api, capsys):
    healthy(api)
    s = spec()
    api.routes[("GET", f"{PTJ}/{s.job_name}")] = (200, {"metadata": {"name": s.job_name, "labels": {
        "app.kubernetes.io/part-of": "grpo-launcher"}}, "status": {}})
    assert main(["submit", CONFIG, "-n", NS]) == 0
    assert not [r for r in api.requests if r[0] == "POST"]
    assert "attaching" in capsys.readouterr().err


def test_other_config_of_same_experiment_is_refused_unless_new(api, capsys):
    healthy(api)
    other = {"metadata": {"name": "grpo-exp3-deadbeef", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {
        "app.kubernetes.io/part-of": "grpo-launcher", "grpo.launcher.io/experiment": "grpo-exp3"}}}
    api.routes[("GET", PTJ)] = (200, {"items": [other]})
    assert main(["submit", CONFIG, "-n", NS]) == 2
    assert "grpo-exp3-deadbeef" in one_line_error(capsys.readouterr().err)
    assert not [r for r in api.requests if r[0] == "POST"]
    api.routes[("POST", CM)] = (201, {})
    api.routes[("POST", PTJ)] = (201, {})
    assert main(["submit", CONFIG, "-n", NS, "--new"]) == 0


def test_failed_job_create_rolls_back_the_configmap(api, capsys):
    healthy(api)
    s = spec()
    api.routes[("POST", CM)] = (201, lambda q, b: json.loads(b))
    api.status("POST", PTJ, 422, f'PyTorchJob.kubeflow.org "{s.job_name}" is invalid: spec.runPolicy: bad')
    api.routes[("DELETE", f"{CM}/{s.job_name}-spec")] = (200, {})
    assert main(["submit", CONFIG, "-n", NS]) == 3
    err = capsys.readouterr().err
    assert "rejected create PyTorchJob" in one_line_error(err)
    assert f"rolled back: deleted ConfigMap {s.job_name}-spec" in err
    assert ("DELETE", f"{CM}/{s.job_name}-spec") in [(r[0], r[1]) for r in api.requests]


def test_server_dry_run_sends_dryrun_all_and_prints(api, capsys, tmp_path):
    healthy(api)
    api.routes[("POST", CM)] = (201, lambda q, b: {**json.loads(b), "dry": q})
    api.routes[("POST", PTJ)] = (201, lambda q, b: {**json.loads(b), "dry": q})
    assert main(["submit", CONFIG, "-n", NS, "--dry-run=server"]) == 0
    out = capsys.readouterr().out
    assert out.count("dryRun: All") == 2 and "kind: PyTorchJob" in out
    assert not (tmp_path / "runs").exists()


def test_client_dry_run_makes_no_request(api, capsys):
    assert main(["submit", CONFIG, "--dry-run=client"]) == 0
    assert "kind: PyTorchJob" in capsys.readouterr().out
    assert api.connections == 0


@pytest.mark.parametrize("verb", ["status", "wait", "logs", "delete"])
def test_unknown_name_exits_2_with_one_line(api, verb, capsys):
    healthy(api)
    assert main([verb, "nope"]) == 2
    assert one_line_error(capsys.readouterr().err) == \
        f"error: no run named 'nope' in namespace {NS} (neither a job nor an experiment with label " \
        "grpo.launcher.io/experiment=nope)"


def test_forbidden_exits_3_with_one_line(api, capsys):
    api.status("GET", PTJ, 403, 'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:x:y" '
                                'cannot list resource "pytorchjobs" in API group "kubeflow.org" in the namespace "team-a"')
    assert main(["list"]) == 3
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("error: forbidden (403) to list pytorchjobs") and "s3cr3t" not in line


def test_unreachable_is_3(tmp_path, capsys, monkeypatch):
    import socket

    from kube_fakes import kubeconfig_for

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(tmp_path / "kc", f"https://127.0.0.1:{port}")))
    assert main(["list"]) == 3
    assert "connection refused" in one_line_error(capsys.readouterr().err)


def test_wait_on_failed_run_without_pods_shows_the_saved_log(api, capsys, tmp_path):
    job = "grpo-exp3-0123abcd"
    api.routes[("GET", f"{PTJ}/{job}")] = (200, {
        "metadata": {"name": job, "labels": {"app.kubernetes.io/part-of": "grpo-launcher"}},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
                                   "message": "backoff limit reached"}]}})
    api.routes[("GET", f"/api/v1/namespaces/{NS}/pods")] = (200, {"items": []})
    logs = tmp_path / "runs" / job / "logs"
    logs.mkdir(parents=True)
    (logs / f"{job}-master-0.log").write_bytes(b"step:1 - a:1\rbar\nRuntimeError: CUDA error: out of memory\n")
    assert main(["wait", job]) == 1
    err = capsys.readouterr().err
    assert "[master-0] RuntimeError: CUDA error: out of memory (saved)" in err
    assert f"{job} failed: PyTorchJobFailed backoff limit reached" in err
