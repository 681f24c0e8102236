"""The Helm chart charts/grpo-exp3 with the real helm: lint, render matrix, refusals, generated files.

Parity with `launcher render` is in test_chart_parity.py; here the chart is checked on its own:
`helm lint --strict`, `helm template` with the defaults and a matrix of overrides (each object
validated strictly against the operators' real CRD schemas and Kubernetes' OpenAPI), bad values
refused with messages that name the key, the cross-field rules agreeing with spec.check_rules, and
the generated values.yaml / values.schema.json / _generated.tpl being fresh.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil

import pydantic
import pytest
import yaml

from chart_support import CHART, ROOT, gen_chart, helm, helm_error, helm_objects, require_helm
from crd_schema import schema_errors
from launcher.spec.load import load_raw, spec_from_raw
from launcher.errors import BadInput
from launcher.spec.model import ExperimentSpec, field_docs

MATRIX = {
    "defaults": [],
    "rayjob": ["--set", "backend=rayjob"],
    "nodes-2": ["--set", "resources.nodes=2"],
    "rayjob-nodes-2": ["--set", "backend=rayjob", "--set", "resources.nodes=2"],
    "queue": ["--set", "scheduling.queue=team-a"],
    "rayjob-queue": ["--set", "backend=rayjob", "--set", "scheduling.queue=team-a"],
    "trainjob": ["--set", "backend=trainjob"],
    "trainjob-nodes-2-queue": ["--set", "backend=trainjob", "--set", "resources.nodes=2", "--set", "scheduling.queue=team-a"],
    "trainjob-ttl-deadline-retries": ["--set", "backend=trainjob", "--set", "run_policy.ttl_seconds_after_finished=3600",
                                      "--set", "run_policy.active_deadline_seconds=86400",
                                      "--set", "run_policy.backoff_limit=2"],
    "pvc": ["--set", "storage.create=true", "--set", "storage.claim_name=grpo-data", "--set", "storage.storage_class=fast"],
    "tolerations": ["--set-json", 'scheduling.tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"},'
                    '{"key":"spot","value":"true","toleration_seconds":60}]'],
    "ttl-deadline": ["--set", "run_policy.ttl_seconds_after_finished=3600", "--set", "run_policy.active_deadline_seconds=86400"],
    "secrets-ib": ["--set", "secrets.hf_token.name=hf", "--set", "secrets.hf_token.key=token", "--set", "network.nccl_ib=true",
                   "--set", "secrets.image_pull_secrets[0]=regcred"],
    "tracking-tensorboard": ["--set", "tracking.mlflow.enabled=true", "--set",
                             "tracking.mlflow.tracking_uri=http://mlflow.team-a.svc:5000",
                             "--set", "tracking.tensorboard.enabled=true", "--set", "storage.claim_name=grpo-data",
                             "--set", "tensorboard_server.enabled=true", "--set", "secrets.image_pull_secrets[0]=regcred"],
}


JOB_KINDS = {"pytorchjob": "PyTorchJob", "rayjob": "RayJob", "trainjob": "TrainJob"}


def _job(objects):
    return next(o for o in objects if o["kind"] in JOB_KINDS.values())


def _backend(args):
    return next((a.split("=", 1)[1] for a in args if a.startswith("backend=")), "pytorchjob")


def _pods(job, objects=()):
    """The job's pod templates; a TrainJob's are in the TrainingRuntime of the same name (pass `objects`)."""
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    if job["kind"] == "TrainJob":
        runtime = next(o for o in objects if o["kind"] == "TrainingRuntime"
                       and o["metadata"]["name"] == job["spec"]["runtimeRef"]["name"])
        return [r["template"]["spec"]["template"] for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]]
    rc = job["spec"]["rayClusterSpec"]
    return [rc["headGroupSpec"]["template"], *(g["template"] for g in rc["workerGroupSpecs"])]


def test_lint_strict():
    require_helm()
    proc = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("case", list(MATRIX), ids=list(MATRIX))
def test_lint_strict_with_overrides(case):
    require_helm()
    helm("lint", "--strict", str(CHART), *MATRIX[case])


@pytest.mark.parametrize("case", list(MATRIX), ids=list(MATRIX))
def test_template_matrix_validates_against_real_schemas(case):
    objects = helm_objects(*MATRIX[case])
    for obj in objects:
        assert schema_errors(obj) == [], f"{case}: {obj['kind']} {obj['metadata']['name']}"
    kinds = sorted(o["kind"] for o in objects)
    # no ServiceAccount/Role: pods run without a token and need no API access (see values.yaml)
    assert not {"ServiceAccount", "Role", "RoleBinding"} & set(kinds)
    job = _job(objects)
    assert job["kind"] == JOB_KINDS[_backend(MATRIX[case])]
    assert re.fullmatch(r"grpo-exp3-[0-9a-f]{8}", job["metadata"]["name"])
    for pod in _pods(job, objects):
        assert pod["spec"]["automountServiceAccountToken"] is False
    if case == "nodes-2":
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
        assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
        assert "podAntiAffinity" in _pods(job)[0]["spec"]["affinity"]
    if case == "rayjob-nodes-2":
        assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2
    if case in ("queue", "rayjob-queue", "trainjob-nodes-2-queue"):
        suspend = job["spec"]["runPolicy"]["suspend"] if job["kind"] == "PyTorchJob" else job["spec"]["suspend"]
        assert suspend is True
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    if job["kind"] == "TrainJob":
        runtime = next(o for o in objects if o["kind"] == "TrainingRuntime")
        assert runtime["metadata"]["name"] == job["metadata"]["name"] == job["spec"]["runtimeRef"]["name"]
        assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                             "name": runtime["metadata"]["name"]}
        nodes = 2 if "nodes-2" in case else 1
        assert job["spec"]["trainer"] == {"numNodes": nodes, "numProcPerNode": 1}
        assert runtime["spec"]["mlPolicy"] == {"numNodes": nodes, "torch": {}}
        [pod] = _pods(job, objects)
        assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]
        assert ("podAntiAffinity" in pod["spec"].get("affinity", {})) == (nodes > 1)
        js = runtime["spec"]["template"]["spec"]
        if case == "trainjob-ttl-deadline-retries":
            assert js["ttlSecondsAfterFinished"] == 3600 and job["spec"]["activeDeadlineSeconds"] == 86400
            assert js["failurePolicy"] == {"maxRestarts": 2}
        else:
            assert "ttlSecondsAfterFinished" not in js and "activeDeadlineSeconds" not in job["spec"]
    if case == "pvc":
        pvc = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
        assert pvc["metadata"]["name"] == "grpo-data" and pvc["spec"]["storageClassName"] == "fast"
        assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "grpo-data"}} in _pods(job)[0]["spec"]["volumes"]
    else:
        assert "PersistentVolumeClaim" not in kinds
    if case == "tolerations":
        assert _pods(job)[0]["spec"]["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Equal", "value": "true", "tolerationSeconds": 60},
        ]
    if case == "ttl-deadline":
        assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 3600
        assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 86400
    if case == "tracking-tensorboard":
        env = {e["name"]: e.get("value") for e in _pods(job)[0]["spec"]["containers"][0]["env"]}
        tb_dir = f"/workspace/checkpoints/verl_grpo_gsm8k/{job['metadata']['name']}/tensorboard"  # per run (config hash)
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.team-a.svc:5000" and env["TENSORBOARD_DIR"] == tb_dir
        deploy = next(o for o in objects if o["kind"] == "Deployment")
        svc = next(o for o in objects if o["kind"] == "Service")
        pod = deploy["spec"]["template"]
        assert pod["spec"]["containers"][0]["command"][3:5] == ["--logdir", tb_dir]
        assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "grpo-data", "readOnly": True}} in pod["spec"]["volumes"]
        assert pod["spec"]["automountServiceAccountToken"] is False and pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
        # its own instance label: the launcher's selectors (the job's instance) never pick the TensorBoard pod
        assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] != job["metadata"]["name"]
    else:
        assert "Deployment" not in kinds and "Service" not in kinds
    if case == "secrets-ib":
        env = _pods(job)[0]["spec"]["containers"][0]["env"]
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in env
        assert {"name": "NCCL_IB_DISABLE", "value": "0"} in env
        assert _pods(job)[0]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_helm_labels_are_the_launchers_plus_bookkeeping():
    job = _job(helm_objects())
    labels = job["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert labels["helm.sh/chart"] == "grpo-exp3-0.1.0"
    assert labels["app.kubernetes.io/instance"] == job["metadata"]["name"]
    assert labels["app.kubernetes.io/part-of"] == "grpo-launcher"


# ---------------------------------------------------------------------------------------------------
# Refusals: schema (types, unknown keys, ranges) and the chart's own `fail` checks (cross-field rules)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "data.train_batch_size=eight"], "at '/data/train_batch_size': got string, want integer"),
        (["--set", "resources.nodes=true"], "at '/resources/nodes': got boolean, want integer"),
        (["--set", "data.batch=8"], "at '/data': additional properties 'batch' not allowed"),
        (["--set", "replicas=3"], "additional properties 'replicas' not allowed"),
        (["--set", "scheduling.tolerations[0].keyy=x"], "additional properties 'keyy' not allowed"),
        (["--set", "resources.gpus_per_node=-1"], "at '/resources/gpus_per_node': minimum: got -1, want 0"),
        (["--set", "resources.nodes=0"], "at '/resources/nodes': minimum: got 0, want 1"),
        (["--set", "backend=mpijob"], "at '/backend'"),
        (["--set", "name=Bad_Name"], "at '/name'"),
        (["--set", "resources.cpu=lots"], "at '/resources/cpu'"),
        (["--set", "rollout.n=null"], "at '/rollout': missing property 'n'"),
        (["--set", "eval.enabled=true", "--set", "eval.model=x"], "at '/eval': additional properties 'model' not allowed"),
        (["--set", "eval.enabled=yes"], "at '/eval/enabled': got string, want boolean"),
        (["--set", "eval.checkpoint=0"], "at '/eval/checkpoint'"),
        (["--set", "eval.checkpoint=last"], "at '/eval/checkpoint'"),
        (["--set", "eval.checkpoint=025"], "at '/eval/checkpoint'"),
    ],
    ids=["wrong-type", "bool-for-int", "unknown-key", "unknown-top-key", "unknown-toleration-key", "gpu-count-negative",
         "nodes-0", "bad-enum", "bad-name", "bad-quantity", "null-required", "eval-unknown-key", "eval-not-bool",
         "eval-step-0", "eval-not-latest", "eval-leading-zero"],
)
def test_schema_refuses_bad_values(args, message):
    err = helm_error(*args)
    assert "values don't meet the specifications of the schema" in err
    assert message in err, err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "data.train_batch_size=9", "--set", "actor.ppo_mini_batch_size=9", "--set", "rollout.n=1"],
         "values.data.train_batch_size must make train_batch_size × rollout.n divisible by the GPU count 2 "
         "(resources.nodes 1 × resources.gpus_per_node 2); 9 × 1 = 9, got 9"),
        (["--set", "actor.ppo_mini_batch_size=16"],
         "values.actor.ppo_mini_batch_size must be at most data.train_batch_size (8), got 16"),
        (["--set", "actor.ppo_micro_batch_size_per_gpu=3"],
         "values.actor.ppo_micro_batch_size_per_gpu must be a divisor of the per-GPU mini-batch"),
        (["--set", "rollout.log_prob_micro_batch_size_per_gpu=3"],
         "values.rollout.log_prob_micro_batch_size_per_gpu must be a divisor of the per-GPU log-prob batch"),
        (["--set", "rollout.tensor_parallel_size=4"],
         "values.rollout.tensor_parallel_size must be a divisor of resources.gpus_per_node (2)"),
        (["--set", "name=" + "a" * 39], "values.name must be at most 38 characters"),
        (["--set", "resources.gpu_type=T4"], 'values.resources.gpu_type must be one of [A100-40GB'),
        (["--set", "storage.create=true"], "values.storage.claim_name must be a claim name when storage.create is true"),
        (["--set", "trainer.logger={console,wandb}"], "values.secrets.wandb_api_key must be a Secret reference"),
        (["--set", "trainer.resume_mode=resume_path"], "values.trainer.resume_from_path must be a global_step_N path"),
        (["--set", "scheduling.namespace=other"],
         'values.scheduling.namespace must be null (the release namespace) or equal the release namespace "default" '
         '(helm --namespace; the objects are created in scheduling.namespace), got "other"'),
        (["--set", "resources.gpus_per_node=0"],
         "values.resources.gpus_per_node must be at least 1 for workload grpo with image "
         "ghcr.io/grpo-launcher/verl-grpo:0.1.0 (0, CPU-only pods, needs an image carrying the verl CPU platform, "
         "whose tag ends in -cpu, e.g. ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu; or workload smoke), got 0"),
        (["--set", "resources.gpus_per_node=0", "--set", "image=ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"],
         'values.actor.strategy must be fsdp2 on CPU-only pods (resources.gpus_per_node 0: verl\'s FSDP1 refuses CPU '
         'parameters), got "fsdp"'),
        (["--set", "resources.gpus_per_node=0", "--set", "image=reg:5000/verl-grpo:0.1.0-cpu@sha256:" + "a" * 64,
          "--set", "actor.strategy=fsdp2", "--set", "rollout.tensor_parallel_size=2"],
         "values.actor.use_remove_padding must be false on CPU-only pods (resources.gpus_per_node 0: removing "
         "padding needs flash-attn's GPU kernels), got true"),
        (["--set", "resources.gpus_per_node=0", "--set", "image=ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu",
          "--set", "actor.strategy=fsdp2", "--set", "actor.use_remove_padding=false",
          "--set", "rollout.tensor_parallel_size=2"],
         "values.rollout.tensor_parallel_size must be 1 on CPU-only pods (resources.gpus_per_node 0: one vLLM CPU "
         "engine per pod), got 2"),
        (["--set", "model.path=builtin:tiny-llama"],
         'values.model.path must be a known built-in model (builtin:tiny-qwen2), a hub id or a path inside the pod, '
         'got "builtin:tiny-llama"'),
        (["--set", "model.path=builtin:tiny-qwen2", "--set", "image=nvcr.io/nvidia/pytorch:25.01-py3"],
         "values.model.path must be a model image nvcr.io/nvidia/pytorch:25.01-py3 carries (builtin:tiny-qwen2 is in "
         "the project's images, named verl-grpo in any registry, and in CPU images, whose tag ends in -cpu, e.g. "
         'ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu), a hub id or a path inside the pod, got "builtin:tiny-qwen2"'),
        (["--set", "model.path=builtin:tiny-qwen2", "--set", "image=ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu",
          "--set", "model.local_dir=/models/x"],
         'values.model.local_dir must be null with a built-in model (builtin:tiny-qwen2 is already in the image), '
         'got "/models/x"'),
        (["--set", "workload=smoke", "--set", "resources.gpus_per_node=0", "--set", "resources.nodes=3"],
         "values.data.train_batch_size must make train_batch_size × rollout.n divisible by the GPU count 3 "
         "(resources.nodes 3 × resources.gpus_per_node 0, a CPU pod counts as 1); 8 × 2 = 16, got 8"),
        (["--set", "trainer.logger={console,mlflow}"], "values.tracking.mlflow.tracking_uri must be a tracking server URI"),
        (["--set", "env[0].name=MLFLOW_RUN_ID", "--set", "env[0].value=x"],
         'values.env[0].name must be a variable the launcher does not set itself'),
        (["--set", "env[0].name=LAUNCHER_ATTEMPT", "--set", "env[0].value=x"],
         'values.env[0].name must be a variable the launcher does not set itself'),
        (["--set", "env[0].name=A"], "values.env[0] must have exactly one of value, secret_key_ref, config_map_key_ref, got 0"),
        (["--set", "tracking.tensorboard.enabled=true", "--set", "tracking.tensorboard.log_dir=/tmp/tb"],
         "values.tracking.tensorboard.log_dir must be a directory under storage.mount_path (/workspace)"),
        (["--set", "tensorboard_server.enabled=true"],
         "values.storage.claim_name must be a claim name when tensorboard_server.enabled is true"),
        (["--set", "backend=trainjob", "--set", "name=9-lives"],
         "values.name must be a name starting with a letter for backend trainjob (a TrainJob's name is an RFC 1035 "
         'label: the CRD refuses one starting with a digit), got "9-lives"'),
        (["--set", "backend=trainjob", "--set", "run_policy.clean_pod_policy=Running"],
         'values.run_policy.clean_pod_policy must be None for backend trainjob (JobSet has no clean-pod policy'),
    ],
    ids=["batch-vs-gpus", "mini-gt-batch", "micro", "log-prob-micro", "tp", "name-length", "gpu-type", "pvc-no-claim",
         "wandb-no-key", "resume-no-path", "namespace-mismatch", "grpo-needs-gpus", "cpu-grpo-fsdp2",
         "cpu-grpo-remove-padding-digest-ref", "cpu-grpo-tp", "builtin-unknown", "builtin-needs-cpu-image",
         "builtin-no-local-dir", "cpu-pod-counts-as-one",
         "mlflow-no-uri", "env-reserved", "env-launcher-prefix", "env-no-source", "tb-dir-off-volume", "tb-server-no-claim",
         "trainjob-digit-name", "trainjob-clean-pod-policy"],
)
def test_fail_checks_explain_cross_field_rules(args, message):
    err = helm_error(*args)
    assert "grpo-exp3: invalid values" in err
    assert message in err, err


def test_all_problems_reported_at_once():
    err = helm_error("--set", "rollout.tensor_parallel_size=4", "--set", "resources.gpu_type=T4")
    assert "(2 problem(s))" in err and "tensor_parallel_size" in err and "gpu_type" in err


def _launcher_fields(overrides: dict) -> set[str]:
    raw = load_raw(ROOT / "configs" / "grpo-exp3.yaml")
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        raw.setdefault(section, {})[key] = value
    try:
        spec_from_raw(raw)
    except BadInput as exc:
        return {line.split(":")[0].strip("- ").strip() for line in str(exc).splitlines() if line.startswith("  - ")}
    return set()


def _helm_fields(overrides: dict) -> set[str]:
    args = list(itertools.chain.from_iterable(("--set", f"{k}={v}") for k, v in overrides.items()))
    proc = helm("template", "grpo-exp3", str(CHART), *args, check=False)
    if proc.returncode == 0:
        return set()
    assert "invalid values" in proc.stderr, proc.stderr
    return set(re.findall(r"^  - values\.([a-z_.]+) must", proc.stderr, re.M))


def _batch_cases() -> list[dict]:
    rng = random.Random(20261129)  # fixed: the same table every run
    cases = []
    for _ in range(40):
        cases.append({
            "data.train_batch_size": rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]),
            "rollout.n": rng.choice([1, 2, 3, 4, 8]),
            "resources.nodes": rng.choice([1, 2, 3]),
            "resources.gpus_per_node": rng.choice([1, 2, 4, 8]),
            "actor.ppo_mini_batch_size": rng.choice([1, 2, 4, 8, 16]),
            "actor.ppo_micro_batch_size_per_gpu": rng.choice([1, 2, 3, 4]),
            "rollout.log_prob_micro_batch_size_per_gpu": rng.choice([1, 2, 4, 8]),
            "rollout.tensor_parallel_size": rng.choice([1, 2, 4, 8]),
        })
    return cases


@pytest.mark.parametrize("overrides", _batch_cases(), ids=lambda c: "-".join(str(v) for v in c.values()))
def test_chart_rules_agree_with_check_rules(overrides):
    """The template's `fail` checks and spec.check_rules refuse the same fields on a fixed random table."""
    require_helm()
    assert _helm_fields(overrides) == _launcher_fields(overrides)


@pytest.mark.parametrize("sets,fields", [
    ({"backend": "trainjob", "name": "9-lives"}, {"name"}),
    ({"backend": "trainjob", "run_policy.clean_pod_policy": "All"}, {"run_policy.clean_pod_policy"}),
    ({"backend": "trainjob", "name": "7up", "run_policy.clean_pod_policy": "Running", "resources.nodes": 2},
     {"name", "run_policy.clean_pod_policy"}),
    # the longest names JobSet derives (38-character name, 1024 nodes) still fit: accepted
    ({"backend": "trainjob", "name": "a" * 38, "resources.nodes": 1024, "resources.gpus_per_node": 1, "data.train_batch_size": 1024,
      "actor.ppo_mini_batch_size": 1024}, set()),
    ({"backend": "pytorchjob", "name": "9-lives", "run_policy.clean_pod_policy": "All"}, set()),  # trainjob's only
    ({"backend": "trainjob", "env": [{"name": "PET_NODE_RANK", "value": "0"}]}, {"env"}),  # Trainer's torch plugin sets it
], ids=["digit-name", "clean-pod-policy", "both-2-nodes", "longest-names", "pytorchjob-unaffected", "pet-env"])
def test_chart_trainjob_rules_agree_with_check_rules(sets, fields):
    """backend trainjob's rules (spec._trainjob_problems, PET_* reserved): the chart refuses the launcher's fields."""
    require_helm()
    raw = load_raw(ROOT / "configs" / "grpo-exp3.yaml")
    args = []
    for dotted, value in sets.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        args += ["--set-json", f"{dotted}={json.dumps(value)}"]
    try:
        spec_from_raw(raw)
        launcher = set()
    except BadInput as exc:
        launcher = {line.split(":")[0].strip("- ").strip() for line in str(exc).splitlines() if line.startswith("  - ")}
    proc = helm("template", "grpo-exp3", str(CHART), *args, check=False)
    # env problems name the item (launcher `env[0].name`, chart `values.env[0].name`): compare the section
    launcher = {"env" if f.startswith("env[") else f for f in launcher}
    chart = set(re.findall(r"^  - values\.([a-z_.]+?)(?:\[\d+\]\.name)? must", proc.stderr, re.M))
    assert launcher == fields and chart == fields, proc.stderr
    assert (proc.returncode != 0) == bool(fields), proc.stderr


CPU_IMAGE = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
CPU_OK = {"resources.gpus_per_node": 0, "image": CPU_IMAGE, "actor.strategy": "fsdp2", "actor.use_remove_padding": False}


@pytest.mark.parametrize("sets,fields", [
    (CPU_OK, set()),
    ({**CPU_OK, "model.path": "builtin:tiny-qwen2", "resources.nodes": 2, "backend": "rayjob"}, set()),
    ({**CPU_OK, "image": "ghcr.io/grpo-launcher/verl-grpo:0.1.0"}, {"resources.gpus_per_node"}),
    ({**CPU_OK, "image": "localhost:5000/verl-cpu"}, {"resources.gpus_per_node"}),  # the port is no tag
    ({**CPU_OK, "image": "r.io/verl:0.1.0-cpu@sha256:" + "0" * 64}, set()),  # relaunch-style digest after the tag
    ({**CPU_OK, "actor.strategy": "fsdp", "actor.use_remove_padding": True, "rollout.tensor_parallel_size": 2},
     {"actor.strategy", "actor.use_remove_padding", "rollout.tensor_parallel_size"}),
    ({"resources.gpus_per_node": 0, "workload": "smoke"}, set()),  # smoke: any image, any strategy
    ({"model.path": "builtin:tiny-qwen2"}, set()),  # the GPU image carries it too
    ({"model.path": "builtin:tiny-qwen2", "image": "nvcr.io/nvidia/pytorch:25.01-py3"}, {"model.path"}),  # not ours
    ({"model.path": "builtin:other", "image": CPU_IMAGE}, {"model.path"}),
    ({"model.path": "builtin:tiny-qwen2", "image": CPU_IMAGE, "model.local_dir": "/m"}, {"model.local_dir"}),
    ({"model.path": "builtin:tiny-qwen2", "image": CPU_IMAGE}, set()),  # GPU pods, CPU image: the rules allow it
], ids=["cpu-ok", "cpu-builtin-rayjob-2", "gpu-image", "port-no-tag", "digest", "cpu-settings", "smoke",
        "builtin-gpu-image", "builtin-other-image", "builtin-unknown", "builtin-local-dir", "builtin-cpu-image-gpus"])
def test_chart_cpu_training_rules_agree_with_check_rules(sets, fields):
    """CPU training and built-in models (spec._cpu_training_problems, _model_problems): the chart refuses the
    launcher's fields, and accepts what it accepts."""
    require_helm()
    raw = load_raw(ROOT / "configs" / "grpo-exp3.yaml")
    args = []
    for dotted, value in sets.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        args += ["--set-json", f"{dotted}={json.dumps(value)}"]
    try:
        spec_from_raw(raw)
        launcher = set()
    except BadInput as exc:
        launcher = {line.split(":")[0].strip("- ").strip() for line in str(exc).splitlines() if line.startswith("  - ")}
    proc = helm("template", "grpo-exp3", str(CHART), *args, check=False)
    chart = set(re.findall(r"^  - values\.([a-z_.]+) must", proc.stderr, re.M))
    assert launcher == fields and chart == fields, proc.stderr
    assert (proc.returncode != 0) == bool(fields), proc.stderr


# ---------------------------------------------------------------------------------------------------
# eval.enabled: the evaluation job instead of the training job, with `launcher eval`'s refusals

CLAIM = ["--set", "storage.claim_name=grpo-ckpt"]
EVAL_ON = ["--set", "eval.enabled=true"]


@pytest.mark.parametrize("backend", list(JOB_KINDS))
@pytest.mark.parametrize("what", [[], [*CLAIM, "--set", "eval.checkpoint=latest"],
                                  [*CLAIM, "--set", "eval.baseline=false", "--set", "eval.checkpoint=25"]],
                         ids=["baseline", "baseline-latest", "step-25"])
def test_eval_renders_only_the_eval_job_and_its_configmap(backend, what):
    objects = helm_objects(*EVAL_ON, "--set", f"backend={backend}", *what)
    for obj in objects:
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "eval"
    job = _job(objects)
    name = job["metadata"]["name"]
    assert re.fullmatch(r"grpo-exp3-eval-[0-9a-f]{8}", name)
    expected = [("ConfigMap", f"{name}-spec"), (job["kind"], name)]
    if job["kind"] == "TrainJob":
        expected.append(("TrainingRuntime", name))
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == sorted(expected)
    for pod in _pods(job, objects):
        assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == name


def test_eval_is_off_by_default_and_never_changes_the_training_job():
    """The eval values are not part of the spec: toggling them leaves the training job's name and spec.yaml alone."""
    default = helm_objects()
    assert _job(default)["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"
    assert default == helm_objects("--set", "eval.baseline=false", "--set", "eval.checkpoint=7")
    evaluated = helm_objects(*EVAL_ON)
    spec_yaml = {o["kind"]: o for o in default}["ConfigMap"]["data"]["spec.yaml"]
    assert {o["kind"]: o for o in evaluated}["ConfigMap"]["data"]["spec.yaml"] == spec_yaml
    assert '"eval"' not in spec_yaml
    assert _job(evaluated)["metadata"]["labels"]["grpo.launcher.io/config-hash"] == \
        _job(default)["metadata"]["labels"]["grpo.launcher.io/config-hash"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "eval.checkpoint=latest"],
         "values.storage.claim_name must be a claim name when eval.checkpoint is set (latest)"),
        (["--set", "eval.checkpoint=25", "--set", "eval.baseline=false"],
         "values.storage.claim_name must be a claim name when eval.checkpoint is set (25)"),
        ([*CLAIM, "--set", "eval.checkpoint=latest", "--set", "trainer.save_freq=-1"],
         "values.trainer.save_freq must not be -1 when eval.checkpoint is set (latest)"),
        (["--set", "eval.baseline=false"],
         'values.eval.checkpoint must be a step number >= 1 or "latest" when eval.enabled is true and eval.baseline '
         "is false"),
    ],
    ids=["latest-no-claim", "step-no-claim", "save-freq-off", "nothing-to-evaluate"],
)
@pytest.mark.parametrize("backend", list(JOB_KINDS))
def test_eval_refusals_match_the_cli(args, message, backend):
    err = helm_error(*EVAL_ON, "--set", f"backend={backend}", *args)
    assert "grpo-exp3: invalid values" in err
    assert message in err, err


@pytest.mark.parametrize(
    "cli_args,helm_args,field",
    [
        (["--checkpoint", "latest"], ["--set", "eval.checkpoint=latest"], "storage.claim_name"),
        (["--checkpoint", "3", "--set", "storage.claim_name=c", "--set", "trainer.save_freq=-1"],
         [*CLAIM, "--set", "eval.checkpoint=3", "--set", "trainer.save_freq=-1"], "trainer.save_freq"),
    ],
    ids=["no-claim", "save-freq-off"],
)
def test_eval_refusals_are_the_clis_refusals(cli_args, helm_args, field, capsys):
    """Whatever `launcher eval` refuses with exit 2, the chart refuses too, for the same field and only it."""
    from launcher.cli.main import main as cli

    assert cli(["eval", str(ROOT / "configs" / "grpo-exp3.yaml"), *cli_args, "--dry-run"]) == 2
    assert field in capsys.readouterr().err
    err = helm_error(*EVAL_ON, "--set", "eval.baseline=false", *helm_args)
    assert "grpo-exp3: invalid values (1 problem(s))" in err, err
    assert f"values.{field} must " in err, err


@pytest.mark.parametrize("case", [[], [*CLAIM, "--set", "eval.checkpoint=latest", "--set", "backend=rayjob"]],
                         ids=["baseline", "rayjob-latest"])
def test_eval_lint_strict(case):
    require_helm()
    helm("lint", "--strict", str(CHART), *EVAL_ON, *case)


def test_eval_notes_name_the_eval_job():
    require_helm()
    out = helm("install", "grpo-exp3", str(CHART), "--dry-run=client", *EVAL_ON).stdout
    notes = out[out.index("NOTES:"):]
    job = _job(helm_objects(*EVAL_ON))["metadata"]["name"]
    assert f"pytorchjob/{job}" in notes and "renders no training job" in notes
    assert f"app.kubernetes.io/instance={job},app.kubernetes.io/component=eval" in notes


# ---------------------------------------------------------------------------------------------------
# Generated files: fresh, derived from the model, and the stale check works


def test_generated_files_are_fresh():
    stale = gen_chart.stale_files(CHART)
    assert not stale, f"stale chart files {sorted(stale)}: run `make chart`"


def test_stale_check_names_the_file_and_the_make_target(tmp_path, capsys):
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    values = copy / "values.yaml"
    values.write_text(values.read_text().replace("train_batch_size: 8", "train_batch_size: 16"))
    (copy / "values.schema.json").write_text("{}\n")
    assert gen_chart.main(["check", "--chart-dir", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "values.yaml" in err and "values.schema.json" in err and "make chart" in err
    assert gen_chart.main(["chart", "--chart-dir", str(copy)]) == 0
    assert gen_chart.main(["check", "--chart-dir", str(copy)]) == 0


def test_values_yaml_mirrors_the_spec_and_documents_every_key():
    text = (CHART / "values.yaml").read_text()
    spec = spec_from_raw(load_raw(ROOT / "configs" / "grpo-exp3.yaml"))
    values = yaml.safe_load(text)
    # the chart-only sections follow the spec's keys; they are not part of the spec
    assert values.pop("eval") == gen_chart.EVAL_VALUES == {"enabled": False, "baseline": True, "checkpoint": None}
    assert values.pop("helm_test") == gen_chart.HELM_TEST_VALUES
    assert values.pop("tensorboard_server") == gen_chart.TENSORBOARD_VALUES
    # the spec's keys, except the chart's own defaults: the namespace is the release's unless set
    assert values["scheduling"].pop("namespace") is None
    expected = spec.model_dump(mode="json")
    del expected["scheduling"]["namespace"]
    assert values == expected
    # every key line is preceded by a `# --` line carrying that field's description
    docs = {**field_docs(), **gen_chart.EVAL_DOCS, **gen_chart.HELM_TEST_DOCS, **gen_chart.TENSORBOARD_DOCS}
    docs["scheduling.namespace"] = gen_chart.CHART_DEFAULTS["scheduling.namespace"][1]
    lines = text.splitlines()
    path: list[str] = []
    seen = 0
    for i, line in enumerate(lines):
        m = re.match(r"^( *)\"?([a-z_]+)\"?:", line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        path = [*path[:depth], m.group(2)]
        dotted = ".".join(path)
        assert lines[i - 1].strip().startswith("# --"), f"{dotted} has no `# --` comment"
        assert lines[i - 1].strip() == f"# -- {docs[dotted]}".strip(), dotted
        seen += 1
    # an optional section left null (reward.function) has no key lines for its own keys: values.schema.json and
    # `launcher schema --docs` document those
    def _null(dotted: str) -> bool:
        node = expected
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return node is None

    under_null = {k for k in docs if any(k.startswith(f"{p}.") for p in docs if _null(p))}
    assert under_null == {"reward.function.path", "reward.function.name", "reward.function.source"}
    assert seen == len(docs) - len(under_null)


def test_schema_is_closed_draft07_without_refs():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert "$ref" not in json.dumps(schema) and "$defs" not in schema

    def objects(node):
        if isinstance(node, dict):
            if "properties" in node:
                yield node
            for v in node.values():
                yield from objects(v)
        elif isinstance(node, list):
            for v in node:
                yield from objects(v)

    closed = list(objects(schema))
    # helm_test.node_selector / tolerations are Kubernetes pass-through fields, closed by their own types
    assert len(closed) >= 15 and all(o["additionalProperties"] is False for o in closed)
    # constraints survive the conversion
    res = schema["properties"]["resources"]["properties"]
    assert res["gpus_per_node"]["minimum"] == 0 and res["gpus_per_node"]["maximum"] == 16
    assert res["cpu"]["pattern"].startswith("^[0-9]")
    assert schema["properties"]["backend"]["enum"] == ["pytorchjob", "rayjob", "trainjob"] == list(JOB_KINDS)
    chart_only = {"eval", "helm_test", "tensorboard_server", "global"}
    assert set(schema["properties"]) == set(ExperimentSpec.model_fields) | chart_only
    assert not chart_only & set(schema["required"])
    # `global` (a parent chart's globals) is the one open object: a subchart gets whatever the parent sets
    assert schema["properties"]["global"] == {"description": gen_chart.GLOBAL_SCHEMA["description"], "type": "object"}
    ev = schema["properties"]["eval"]
    assert ev["additionalProperties"] is False and set(ev["properties"]) == {"enabled", "baseline", "checkpoint"}


def test_schema_accepts_exactly_what_the_model_accepts_on_samples():
    """jsonschema with the generated schema and pydantic agree on a few valid and invalid documents."""
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    good = spec_from_raw(load_raw(ROOT / "configs" / "grpo-exp4.yaml")).model_dump(mode="json")
    jsonschema.Draft7Validator(schema).validate(good)
    for path, bad in ((("rollout", "n"), 0), (("image",), "bad image"), (("scheduling", "extra"), 1),
                      (("resources", "memory"), 128)):
        doc = json.loads(json.dumps(good))
        node = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = bad
        # both refuse the document for the field that was broken, not for some other reason
        errors = list(jsonschema.Draft7Validator(schema).iter_errors(doc))
        assert errors and all(_schema_error_path(e) == path for e in errors), (path, [e.message for e in errors])
        with pytest.raises(pydantic.ValidationError) as refused:
            ExperimentSpec.model_validate(doc)
        assert [e["loc"] for e in refused.value.errors()] == [path], refused.value


def _schema_error_path(error) -> tuple:
    """The field a jsonschema error is about: its path, plus the key an additionalProperties error names."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties":
        path += tuple(re.findall(r"'([^']+)' was unexpected", error.message))
    return path


def test_chart_version_is_the_launcher_version():
    from launcher import __version__

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == __version__ and chart["version"] == __version__


def test_notes_tell_how_to_follow_the_run():
    """NOTES.txt, rendered by a client-side dry-run install (no cluster), names the job and the commands."""
    require_helm()
    out = helm("install", "grpo-exp3", str(CHART), "--dry-run=client", "--set", "backend=rayjob").stdout
    notes = out[out.index("NOTES:"):]
    job = _job(helm_objects("--set", "backend=rayjob"))["metadata"]["name"]
    assert f"python -m launcher logs -f {job} --namespace default" in notes
    assert f"kubectl -n default get rayjob {job}" in notes
    assert f"kubectl -n default logs -f -l app.kubernetes.io/instance={job}" in notes
    assert "port-forward" not in notes
    out = helm("install", "grpo-exp3", str(CHART), "--dry-run=client", "--set", "tensorboard_server.enabled=true",
               "--set", "storage.claim_name=ckpt", "--set", "tracking.tensorboard.enabled=true").stdout
    assert "kubectl -n default port-forward svc/grpo-exp3-tensorboard 6006:6006" in out[out.index("NOTES:"):]


def test_notes_name_the_trainjob():
    """backend=trainjob: NOTES names the TrainJob for kubectl (`kubectl get trainjob NAME`)."""
    require_helm()
    out = helm("install", "grpo-exp3", str(CHART), "--dry-run=client", "--set", "backend=trainjob").stdout
    notes = out[out.index("NOTES:"):]
    job = _job(helm_objects("--set", "backend=trainjob"))["metadata"]["name"]
    assert f"is running as trainjob/{job} in namespace default" in notes
    assert f"kubectl -n default get trainjob {job} -w" in notes
    assert f"python -m launcher logs -f {job} --namespace default" in notes


def test_missing_helm_says_run_make_tools(tmp_path, monkeypatch):
    """Only the `make tools` locations are searched (never PATH), and the error says how to fix it."""
    from helm_tools import ToolMissing, tool

    monkeypatch.setenv("GRPO_TOOLS_BIN", str(tmp_path / "nothing"))
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    on_path = tmp_path / "path-bin"
    on_path.mkdir()
    (on_path / "helm").write_text("#!/bin/sh\n")
    (on_path / "helm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{on_path}:{os.environ.get('PATH', '')}")  # a helm on PATH is not used
    with pytest.raises(ToolMissing, match=r"helm not found .*run `make tools`"):
        tool("helm")
    (tmp_path / "nothing").mkdir()
    fake = tmp_path / "nothing" / "helm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert tool("helm") == str(fake)  # $GRPO_TOOLS_BIN wins over the cache


# verl.overrides: the chart refuses exactly what the launcher refuses (spec.verl.override_conflicts vs _validate.tpl)
_OVERRIDE_TABLE = ["actor_rollout_ref.rollout.max_num_batched_tokens=2048", "data.train_batch_size=16",
                   "actor_rollout_ref.actor.optim={lr:1}", "trainer=null", "~reward.custom_reward_function",
                   "+trainer.experiment_name=x", "++ray_kwargs.ray_init.num_gpus=1", "actor_rollout_ref.rollout.dtype=bf16",
                   "actor_rollout_ref.rollout.enforce_eager=False", "+actor_rollout_ref.actor.fsdp_config.wrap_policy.x=1",
                   "trainer.logger_extra=1", "critic.optim.lr=1"]


@pytest.mark.parametrize("config", ["grpo-exp3.yaml", "grpo-exp3-cpu.yaml"])
def test_verl_override_refusals_match_the_cli(config, tmp_path):
    from chart_support import values_file

    path = ROOT / "configs" / config
    try:
        spec_from_raw({**load_raw(path), "verl": {"overrides": _OVERRIDE_TABLE}})
        cli: dict[int, str] = {}
    except BadInput as exc:
        cli = {int(m[0]): m[1] for m in re.findall(r"verl\.overrides\.(\d+): expected a verl key the launcher does "
                                                   r"not set itself \((.*)\), got", str(exc))}
    err = helm_error("-f", str(values_file(tmp_path, path)), "--set-json", f"verl.overrides={json.dumps(_OVERRIDE_TABLE)}")
    chart = {int(m[0]): m[1] for m in re.findall(r"values\.verl\.overrides\[(\d+)\] must be a verl key the launcher "
                                                 r"does not set itself \((.*)\), got", err)}
    assert chart == cli
    refused = set(cli)
    assert {1, 2, 3, 4, 5, 6} <= refused and not {0, 9, 10, 11} & refused  # the table means something
    assert (7 in refused and 8 in refused) == (config == "grpo-exp3-cpu.yaml")  # CPU training's own keys


def test_reward_file_refusals_match_the_cli(tmp_path):
    """A local reward path needs its content (--set-file), a pkg:// module must not have one: the chart says so as
    the CLI does. (Helm cannot parse Python: the pod's entrypoint runs the CLI's rules on spec.yaml for that.)"""
    from chart_support import values_file

    cpu = ROOT / "configs" / "grpo-exp3-cpu.yaml"
    values = str(values_file(tmp_path, cpu))
    for sets, cli_words, chart_words in [
        (["reward.function.path=./r.py"], "reward.function.source: expected the content of ./r.py",
         "values.reward.function.source must be the content of ./r.py: --set-file reward.function.source=./r.py"),
        (["reward.function.source=x = 1"], "reward.function.source: expected nothing: a pkg:// module",
         "values.reward.function.source must be unset for a pkg:// module"),
    ]:
        raw = load_raw(cpu)
        for item in sets:
            key, value = item.split("=", 1)
            raw["reward"]["function"][key.rsplit(".", 1)[1]] = value
        with pytest.raises(BadInput) as exc:
            spec_from_raw(raw)
        assert cli_words in str(exc.value)
        assert chart_words in helm_error("-f", values, *[a for s in sets for a in ("--set-string", s)])


def test_stall_restart_refusals_match_the_cli(tmp_path):
    """health.stall.action restart: only a PyTorchJob with retries (its pods are started again to resume); the chart
    refuses the rest as the CLI does, in the CLI's words."""
    from chart_support import values_file

    from launcher.spec.load import load_spec
    from launcher.spec.rules import STALL_RESTART_BACKOFF, STALL_RESTART_EXPECTED

    cpu = ROOT / "configs" / "grpo-exp3-cpu.yaml"
    values = str(values_file(tmp_path, cpu))
    for sets, cli_words, chart_words in [
        (["health.stall.action=restart"], f"run_policy.backoff_limit: expected {STALL_RESTART_BACKOFF}",
         f"values.run_policy.backoff_limit must be {STALL_RESTART_BACKOFF}, got 0"),
        (["health.stall.action=restart", "run_policy.backoff_limit=2", "backend=rayjob"],
         f"health.stall.action: expected {STALL_RESTART_EXPECTED}",
         f"values.health.stall.action must be {STALL_RESTART_EXPECTED}, got restart"),
    ]:
        with pytest.raises(BadInput) as exc:
            load_spec(cpu, sets)
        assert cli_words in str(exc.value)
        assert chart_words in helm_error("-f", values, *[a for s in sets for a in ("--set", s)])
    # accepted by both
    ok = ["health.stall.action=restart", "run_policy.backoff_limit=2"]
    assert load_spec(cpu, ok).health.stall.action == "restart"
    assert helm_objects("-f", values, *[a for s in ok for a in ("--set", s)])
