"""CPU-only pods (resources.gpus_per_node 0, workload smoke): configs/smoke-cpu.yaml on both backends.

A CPU pod must ask for no GPU anywhere, must not be pinned to a GPU product, must carry the real
node's selector and toleration, and must otherwise be the very pod a GRPO run gets (security,
volumes, /dev/shm, init container, labels, command).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crd_schema import schema_errors
from launcher.spec.load import load_spec
from launcher.render.manifests import INIT_RESOURCES, render, to_yaml

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs" / "smoke-cpu.yaml"
EXP3 = REPO / "configs" / "grpo-exp3.yaml"
REAL_NODE = {"grpo.launcher.io/node-kind": "real"}
REAL_TAINT = {"key": "grpo.launcher.io/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def _pod_templates(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    cluster = job["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]


def _objects(backend: str, nodes: int) -> list[dict]:
    objects = render(load_spec(SMOKE, [f"resources.nodes={nodes}"], backend))
    for obj in objects:
        assert schema_errors(obj) == [], obj["kind"]
    return objects


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
@pytest.mark.parametrize("nodes", [1, 2])
def test_cpu_pods_ask_for_no_gpu_and_target_the_real_node(backend, nodes):
    objects = _objects(backend, nodes)
    text = to_yaml(objects)
    # the spec inside the ConfigMap names the GPU resource key; the job itself never does
    assert "nvidia.com/gpu" not in to_yaml(objects[-1:])
    assert "nvidia.com/gpu:" not in text.replace('"gpu_resource": "nvidia.com/gpu"', "")
    job = objects[-1]
    templates = _pod_templates(job)
    assert len(templates) == (1 if backend == "pytorchjob" and nodes == 1 else 2)
    for t in templates:
        spec = t["spec"]
        assert spec["nodeSelector"] == REAL_NODE  # no nvidia.com/gpu.product
        assert spec["tolerations"] == [REAL_TAINT]
        main = spec["containers"][0]
        limits = main["resources"]["limits"]
        assert set(limits) == {"cpu", "memory"} and main["resources"]["requests"] == limits
        # the init container is sized like its pod, so the pod asks for no more than its container
        init = spec["initContainers"][0]
        assert init["resources"] == {"requests": limits, "limits": limits}
        assert init["command"][-1] == "--prepare-data-only"


def test_cpu_pod_sizes_come_from_the_config():
    job = _objects("pytorchjob", 2)[-1]
    for t in _pod_templates(job):
        assert t["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "2Gi"}
        assert t["spec"]["affinity"]["podAntiAffinity"]  # still one pod per node
    ray = _objects("rayjob", 1)[-1]
    head, worker = _pod_templates(ray)
    assert head["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "2Gi"}
    assert worker["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "2Gi"}
    # KubeRay's num-gpus for the head stays 0; the worker group sets nothing (no GPU limit to read)
    assert ray["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"


def test_a_cpu_smoke_pod_is_the_grpo_pod_apart_from_size_and_placement():
    """Same security context, volumes, env, command and labels as exp3's pod: only size and placement differ."""
    sets = ["workload=smoke", "resources.gpus_per_node=0", "resources.cpu=500m", "resources.memory=2Gi",
            "name=grpo-exp3"]
    cpu = render(load_spec(EXP3, sets))[-1]
    gpu = render(load_spec(EXP3, []))[-1]
    a = cpu["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    b = gpu["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    for key in ("securityContext", "automountServiceAccountToken", "enableServiceLinks",
                "terminationGracePeriodSeconds", "restartPolicy"):
        assert a["spec"][key] == b["spec"][key], key
    ca, cb = a["spec"]["containers"][0], b["spec"]["containers"][0]
    assert ca["command"] == cb["command"] and ca["securityContext"] == cb["securityContext"]
    assert ca["volumeMounts"] == cb["volumeMounts"]
    assert [e["name"] for e in ca["env"]] == [e["name"] for e in cb["env"]]
    # volumes differ only by the ConfigMap's name (the config hash)
    strip = [{**v, "configMap": None} if "configMap" in v else v for v in a["spec"]["volumes"]]
    assert strip == [{**v, "configMap": None} if "configMap" in v else v for v in b["spec"]["volumes"]]
    assert set(a["metadata"]["labels"]) == set(b["metadata"]["labels"])
    assert "nvidia.com/gpu.product" not in a["spec"].get("nodeSelector", {})
    assert b["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


def test_gpu_pods_keep_the_fixed_init_container_size():
    job = render(load_spec(EXP3, []))[-1]
    init = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["initContainers"][0]
    assert init["resources"] == {"requests": INIT_RESOURCES, "limits": INIT_RESOURCES}


def test_smoke_workload_on_gpu_pods_keeps_the_gpu_limit():
    job = render(load_spec(EXP3, ["workload=smoke"]))[-1]
    limits = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 2


# --------------------------------------------------------------------------------------------------
# CPU training (workload grpo on CPU-only pods): configs/grpo-exp3-cpu.yaml

EXP3_CPU = REPO / "configs" / "grpo-exp3-cpu.yaml"


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob", "trainjob"])
@pytest.mark.parametrize("nodes", [1, 2])
def test_cpu_training_pods_are_cpu_pods_on_the_real_nodes(backend, nodes):
    objects = render(load_spec(EXP3_CPU, [f"resources.nodes={nodes}"], backend))
    for obj in objects:
        assert schema_errors(obj) == [], obj["kind"]
    job = objects[-1]
    assert "nvidia.com/gpu" not in to_yaml(objects[-1:])
    pods = (_pod_templates(job) if job["kind"] != "TrainJob"
            else [objects[-2]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]])
    for t in pods:
        assert t["spec"]["nodeSelector"] == REAL_NODE and t["spec"]["tolerations"] == [REAL_TAINT]
        assert t["spec"]["containers"][0]["image"] == "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
    worker = pods[-1]["spec"]["containers"][0]["resources"]["limits"]
    assert worker == {"cpu": "1500m", "memory": "12Gi"}


def test_cpu_training_rayjob_workers_declare_one_logical_gpu():
    """KubeRay starts the workers' raylets: one logical GPU for verl's resource pools, 16 CPUs for TransferQueue."""
    cluster = render(load_spec(EXP3_CPU, [], "rayjob"))[-1]["spec"]["rayClusterSpec"]
    assert cluster["workerGroupSpecs"][0]["rayStartParams"] == {"num-cpus": "16", "num-gpus": "1"}
    assert cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"  # the head still runs only the driver
    # the smoke workload on the same pods trains nothing: KubeRay's own defaults
    smoke = render(load_spec(EXP3_CPU, ["workload=smoke"], "rayjob"))[-1]["spec"]["rayClusterSpec"]
    assert smoke["workerGroupSpecs"][0]["rayStartParams"] == {}
    gpu = render(load_spec(EXP3, [], "rayjob"))[-1]["spec"]["rayClusterSpec"]
    assert gpu["workerGroupSpecs"][0]["rayStartParams"] == {}
