"""Scale-out rendering: replicas, anti-affinity, gang admission and NCCL settings on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from crd_schema import schema_errors
from launcher.spec import names as L
from launcher.spec.load import load_spec
from launcher.render.manifests import render

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"


def _job(backend: str, *sets: str) -> dict:
    objects = render(load_spec(EXP3, list(sets), backend))
    for obj in objects:
        assert schema_errors(obj) == [], obj["kind"]
    return objects[-1]


def _gpu_templates(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return [g["template"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]


def _env(template: dict) -> dict:
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}


def test_pytorchjob_master_plus_workers_each_with_the_per_node_gpus():
    job = _job("pytorchjob", "resources.nodes=4", "data.train_batch_size=16", "actor.ppo_mini_batch_size=16")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    for t in _gpu_templates(job):
        assert t["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
        term = t["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"] == {L.INSTANCE_LABEL: job["metadata"]["name"], L.ROLE_LABEL: "gpu"}
        assert t["metadata"]["labels"][L.ROLE_LABEL] == "gpu"  # the selector matches the pods themselves
    # Without Kueue, the PodGroup's minAvailable asks a gang scheduler for all four pods at once.
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}
    assert "suspend" not in job["spec"]["runPolicy"]


def test_single_node_has_no_spread_rules():
    job = _job("pytorchjob")
    assert "Worker" not in job["spec"]["pytorchReplicaSpecs"]
    assert "affinity" not in _gpu_templates(job)[0]["spec"]
    assert "schedulingPolicy" not in job["spec"]["runPolicy"]


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_kueue_queue_creates_the_job_suspended_with_its_label(backend):
    job = _job(backend, "resources.nodes=2", "scheduling.queue=team-a")
    spec = job["spec"]["runPolicy"] if backend == "pytorchjob" else job["spec"]
    assert spec["suspend"] is True
    assert job["metadata"]["labels"][L.KUEUE_QUEUE_LABEL] == "team-a"
    if backend == "pytorchjob":
        assert "schedulingPolicy" not in spec  # Kueue admits the whole job; no second gang mechanism


def test_rayjob_worker_group_matches_the_config_and_the_head_has_no_gpu():
    job = _job("rayjob", "resources.nodes=3", "data.train_batch_size=6", "actor.ppo_mini_batch_size=6")
    rc = job["spec"]["rayClusterSpec"]
    (group,) = rc["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    assert group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    head = rc["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert "nvidia.com/gpu" not in head["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert head["template"]["metadata"]["labels"][L.ROLE_LABEL] == "head"  # never repels the GPU pods
    assert job["spec"]["entrypoint"].startswith("python3 -m launcher.entrypoint --config ")


def test_nccl_defaults_work_on_plain_ethernet_and_ib_is_one_switch():
    env = _env(_gpu_templates(_job("pytorchjob", "resources.nodes=2"))[0])
    assert env["NCCL_IB_DISABLE"] == "1" and "NCCL_SOCKET_IFNAME" not in env
    t = _gpu_templates(_job("pytorchjob", "resources.nodes=2", "network.nccl_ib=true",
                            "network.nccl_socket_ifname=eth0"))[0]
    env = _env(t)
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    caps = t["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["IPC_LOCK"]}  # RDMA pins memory


@pytest.mark.parametrize("sets,field", [
    (["resources.nodes=3"], "data.train_batch_size"),  # 8 × 2 = 16 samples over 6 GPUs
    (["resources.nodes=2", "rollout.tensor_parallel_size=4"], "rollout.tensor_parallel_size"),  # TP spans nodes
])
def test_multinode_validation(sets, field):
    from launcher.errors import BadInput

    with pytest.raises(BadInput, match=rf"- {field}: expected"):
        load_spec(EXP3, sets)
