"""Backend trainjob against the real API server with the real Kubeflow Trainer v2.2 and JobSet v0.11 webhooks.

Every rendered TrainingRuntime and TrainJob (exp3 and exp4, one and two nodes, a Kueue queue) is sent with
server-side field validation `Strict` (an unknown field is an error, not pruned): the runtime through Trainer's
TrainingRuntime webhook, the TrainJob (its runtime stored first; a runtime alone starts nothing) through the
TrainJob defaulting and validating webhooks, which read the runtime and run the torch plugin's checks. Also
`launcher submit --dry-run=server` creates nothing, and Trainer's webhook really refuses a runtime whose
container is not named `node` (so the rule the render follows is live here, not assumed).

Running TrainJobs end to end (pods, logs, metrics, failure) is in the lead's e2e tests.
"""
from __future__ import annotations

import json

import pytest
import yaml

from launcher_helpers import CONFIG, run_launcher

pytestmark = pytest.mark.cluster

VARIANTS = [
    ("grpo-exp3", ()),
    ("grpo-exp3", ("resources.nodes=2",)),
    ("grpo-exp4", ("resources.nodes=2", "run_policy.backoff_limit=2", "run_policy.active_deadline_seconds=3600",
                   "run_policy.ttl_seconds_after_finished=600")),
    ("grpo-exp3", ("resources.nodes=2", "scheduling.queue=team-a")),
]


def _render(namespace: str, exp: str, sets: tuple[str, ...]) -> list[dict]:
    from launcher.spec.load import load_spec
    from launcher.render.manifests import render

    config = CONFIG.replace("grpo-exp3", exp)
    return render(load_spec(config, [f"scheduling.namespace={namespace}", *sets], "trainjob"))


def _kubectl_create(info, namespace: str, obj: dict, *, dry_run: bool, check: bool = True):
    args = ["-n", namespace, "create", "--validate=strict", "-o", "json", "-f", "-"]
    if dry_run:
        args.insert(3, "--dry-run=server")
    return info.kubectl(*args, input=json.dumps(obj), check=check)


@pytest.mark.parametrize("exp,sets", VARIANTS, ids=lambda v: v if isinstance(v, str) else " ".join(v) or "1 node")
def test_rendered_runtime_and_trainjob_pass_trainer_and_jobset_admission(trainer, namespace, exp, sets):
    info = trainer
    cm, runtime, job = _render(namespace, exp, sets)
    stored = json.loads(_kubectl_create(info, namespace, runtime, dry_run=False).stdout)
    try:
        assert stored["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] == "node"
        out = json.loads(_kubectl_create(info, namespace, job, dry_run=True).stdout)
        # Trainer's defaulting webhook and the CRD defaults ran; what we sent came back unchanged
        assert out["spec"]["runtimeRef"] == job["spec"]["runtimeRef"]
        assert out["spec"]["trainer"] == job["spec"]["trainer"]
        assert out["spec"].get("suspend", False) is job["spec"].get("suspend", False)
        assert out["spec"].get("activeDeadlineSeconds") == job["spec"].get("activeDeadlineSeconds")
        assert out["metadata"]["labels"] == job["metadata"]["labels"]
        assert out["metadata"]["uid"]  # the server's answer, not our object
        _kubectl_create(info, namespace, cm, dry_run=True)
    finally:
        info.kubectl("-n", namespace, "delete", "trainingruntime", runtime["metadata"]["name"], "--wait=false")
    # nothing of the TrainJob was stored: no TrainJob, no JobSet
    assert info.kubectl("-n", namespace, "get", "trainjobs,jobsets", "-o", "name").stdout.strip() == ""


def test_trainers_webhook_refuses_a_runtime_without_the_node_container(trainer, namespace):
    _, runtime, _ = _render(namespace, "grpo-exp3", ())
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["name"] = "trainer"
    got = _kubectl_create(trainer, namespace, runtime, dry_run=True, check=False)
    assert got.returncode != 0
    assert "must contain the required container for the ancestor: trainer" in got.stderr, got.stderr


def test_submit_server_dry_run_of_a_trainjob_creates_nothing(trainer, namespace, tmp_path):
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, "--backend", "trainjob",
                                 "--set", "resources.nodes=2", "--dry-run=server"], trainer, tmp_path)
    assert rc == 0, err
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["ConfigMap", "TrainingRuntime", "TrainJob"]
    runtime = list(yaml.safe_load_all(out))[1]
    assert runtime["metadata"]["uid"]  # the server filled it in
    # Trainer's TrainJob webhook reads the stored runtime, which a dry run never stores: said, not hidden
    assert "Kubeflow Trainer's webhook checks it only against a stored TrainingRuntime" in err, err
    assert trainer.kubectl("-n", namespace, "get", "configmaps,trainingruntimes,trainjobs", "-l",
                                "app.kubernetes.io/part-of=grpo-launcher", "-o", "name").stdout.strip() == ""


def test_doctor_sees_the_trainjob_backend_served(trainer, namespace, tmp_path):
    rc, out, err = run_launcher(["doctor", CONFIG, "-n", namespace, "--backend", "trainjob"], trainer, tmp_path)
    assert "Traceback" not in err, err
    line = next(ln for ln in out.splitlines() if " backend" in ln[:12])
    assert line.startswith("✓ backend"), out
    assert "trainjobs.trainer.kubeflow.org v1alpha1" in line and "jobsets.jobset.x-k8s.io v1alpha2" in line
