"""GPU selection per platform: resources.gpu_type × resources.gpu_label_scheme → the GPU pods' placement.

The expected labels below are written out by hand from each platform's documentation (the sources in
launcher/spec/gpu.py and the README), not read from the table, so an edit to the table that
changes what a job asks for fails here. Every rendered object is validated against the operators'
CRDs and Kubernetes' OpenAPI schemas (crd_schema), on both backends.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crd_schema import schema_errors
from launcher.cli.main import main
from launcher.spec import gpu as G
from launcher.spec.load import load_spec
from launcher.render.manifests import render

ROOT = Path(__file__).resolve().parents[2]
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"
IT = "node.kubernetes.io/instance-type"
AKS = {"kubernetes.azure.com/accelerator": "nvidia"}

# (scheme, gpu_type) -> (nodeSelector the GPU pods get, nodeAffinity In expressions {key: values})
EXPECTED: dict[tuple[str, str], tuple[dict, dict]] = {
    ("gfd", "A100-40GB"): ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, {}),
    ("gfd", "A100-80GB"): ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, {}),
    ("gfd", "A100-80GB-PCIE"): ({"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}, {}),
    ("gfd", "H100-80GB"): ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {}),
    ("gfd", "H200"): ({"nvidia.com/gpu.product": "NVIDIA-H200"}, {}),
    ("gfd", "L40S"): ({"nvidia.com/gpu.product": "NVIDIA-L40S"}, {}),
    ("gke", "A100-40GB"): ({"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}, {}),
    ("gke", "A100-80GB"): ({"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}, {}),
    ("gke", "H100-80GB"): ({}, {"cloud.google.com/gke-accelerator": ["nvidia-h100-80gb", "nvidia-h100-mega-80gb"]}),
    ("gke", "H200"): ({"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}, {}),
    ("karpenter", "A100-40GB"): ({"karpenter.k8s.aws/instance-gpu-name": "a100",
                                  "karpenter.k8s.aws/instance-gpu-memory": "40960"}, {}),
    ("karpenter", "A100-80GB"): ({"karpenter.k8s.aws/instance-gpu-name": "a100",
                                  "karpenter.k8s.aws/instance-gpu-memory": "81920"}, {}),
    ("karpenter", "H100-80GB"): ({"karpenter.k8s.aws/instance-gpu-name": "h100"}, {}),
    ("karpenter", "H200"): ({"karpenter.k8s.aws/instance-gpu-name": "h200"}, {}),
    ("karpenter", "L40S"): ({"karpenter.k8s.aws/instance-gpu-name": "l40s"}, {}),
    ("aks", "A100-40GB"): (AKS | {IT: "Standard_ND96asr_v4"}, {}),
    ("aks", "A100-80GB"): (AKS | {IT: "Standard_ND96amsr_A100_v4"}, {}),
    ("aks", "A100-80GB-PCIE"): (AKS, {IT: ["Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4",
                                           "Standard_NC96ads_A100_v4"]}),
    ("aks", "H100-80GB"): (AKS | {IT: "Standard_ND96isr_H100_v5"}, {}),
    ("aks", "H200"): (AKS | {IT: "Standard_ND96isr_H200_v5"}, {}),
}
NOT_OFFERED = [("gke", "A100-80GB-PCIE"), ("gke", "L40S"), ("karpenter", "A100-80GB-PCIE"), ("aks", "L40S")]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _job(backend: str, *sets: str) -> dict:
    objects = render(load_spec(EXP3, list(sets), backend))
    for obj in objects:
        assert schema_errors(obj) == [], obj["kind"]
    return objects[-1]


def _gpu_pods(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return [g["template"]["spec"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]


def _other_pods(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        return []
    return [job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"],
            job["spec"]["submitterPodTemplate"]["spec"]]


def _node_in(pod: dict) -> dict:
    terms = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    assert len(terms) <= 1
    return {e["key"]: e["values"] for t in terms for e in t["matchExpressions"] if e["operator"] == "In"}


def test_the_table_covers_exactly_the_documented_pairs():
    assert {(s, t) for s, types in G.TABLE.items() for t in types} == set(EXPECTED)
    for s, t in NOT_OFFERED:
        assert t not in G.TABLE[s]


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
@pytest.mark.parametrize(("scheme", "gpu_type"), sorted(EXPECTED), ids=lambda v: str(v))
def test_each_scheme_and_gpu_type_renders_the_platform_labels(scheme, gpu_type, backend):
    selector, node_in = EXPECTED[(scheme, gpu_type)]
    job = _job(backend, f"resources.gpu_label_scheme={scheme}", f"resources.gpu_type={gpu_type}")
    for pod in _gpu_pods(job):
        assert pod.get("nodeSelector", {}) == selector
        assert _node_in(pod) == node_in
        assert GPU_TOLERATION in pod["tolerations"]
    for pod in _other_pods(job):  # the Ray head and submitter ask for no GPU: no GPU labels, no GPU toleration
        assert "nodeSelector" not in pod and "affinity" not in pod and "tolerations" not in pod


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
@pytest.mark.parametrize("scheme", G.SCHEMES)
def test_gpu_type_null_renders_no_product_selector(scheme, backend):
    job = _job(backend, f"resources.gpu_label_scheme={scheme}", "resources.gpu_type=null")
    label_keys = set(G.keys(scheme))
    for pod in _gpu_pods(job):
        assert "nodeSelector" not in pod and "affinity" not in pod
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2  # still a GPU pod
        assert pod["tolerations"] == [GPU_TOLERATION]
        assert not any(k in json.dumps(pod) for k in label_keys)


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_user_node_selector_affinity_and_tolerations_win_over_the_preset(backend):
    own_affinity = ('{"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": '
                    '[{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}]}}}')
    job = _job(backend, "resources.gpu_label_scheme=gke", "resources.gpu_type=H100-80GB", "resources.nodes=2",
               'scheduling.node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}',
               f"scheduling.affinity={own_affinity}",
               'scheduling.tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", '
               '"effect": "NoSchedule"}]')
    for pod in _gpu_pods(job):
        assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
        assert _node_in(pod) == {"pool": ["a", "b"]}  # the user's nodeAffinity replaced the preset's
        assert "podAntiAffinity" in pod["affinity"]  # keys the user did not give stay the launcher's
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                       "effect": "NoSchedule"}]  # theirs, not a second one
    for pod in _other_pods(job):
        assert _node_in(pod) == {"pool": ["a", "b"]}


def test_user_node_selector_overrides_the_same_key_of_the_preset():
    job = _job("pytorchjob", "resources.gpu_label_scheme=karpenter", "resources.gpu_type=A100-80GB",
               'scheduling.node_selector={"karpenter.k8s.aws/instance-gpu-memory": "40960", "x": "y"}')
    assert _gpu_pods(job)[0]["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "a100",
                                                 "karpenter.k8s.aws/instance-gpu-memory": "40960", "x": "y"}
    job = _job("pytorchjob", 'scheduling.node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG"}')
    assert _gpu_pods(job)[0]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG"}


def test_gpu_toleration_can_be_turned_off():
    job = _job("pytorchjob", "scheduling.gpu_toleration=false")
    assert "tolerations" not in _gpu_pods(job)[0]


def test_cpu_only_pods_get_no_gpu_selector_or_toleration():
    objects = render(load_spec(ROOT / "configs" / "smoke-cpu.yaml", ["resources.gpu_label_scheme=aks"]))
    pod = _gpu_pods(objects[-1])[0]
    assert "affinity" not in pod
    assert pod["tolerations"] == [{"key": "grpo.launcher.io/real-node", "operator": "Equal", "value": "true",
                                   "effect": "NoSchedule"}]  # the config's own, no GPU toleration
    assert pod["nodeSelector"] == {"grpo.launcher.io/node-kind": "real"}


def test_gfd_key_follows_gpu_product_label():
    job = _job("pytorchjob", "resources.gpu_product_label=example.com/gpu-model")
    assert _gpu_pods(job)[0]["nodeSelector"] == {"example.com/gpu-model": "NVIDIA-A100-SXM4-80GB"}


# `validate` in this process (the CLI's exit code and stderr are what is tested; tests/cli/test_cli.py keeps
# `python -m launcher` itself): a new interpreter per case cost ~1 s of import each.
@pytest.mark.parametrize(("scheme", "gpu_type"), NOT_OFFERED)
def test_a_gpu_the_platform_does_not_offer_is_bad_input_naming_the_field(scheme, gpu_type, capsys):
    rc = main(["validate", str(EXP3),
               "--set", f"resources.gpu_label_scheme={scheme}", "--set", f"resources.gpu_type={gpu_type}"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "resources.gpu_type" in err and f"gpu_label_scheme {scheme}" in err
    assert repr(gpu_type) in err or gpu_type in err


def test_unknown_scheme_is_refused(capsys):
    rc = main(["validate", str(EXP3), "--set", "resources.gpu_label_scheme=eks"])
    assert rc == 2 and "resources.gpu_label_scheme" in capsys.readouterr().err


def test_readme_table_is_the_code_table():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- gpu-table:start -->\n(.*?)\n<!-- gpu-table:end -->", readme, re.S)
    assert block, "README.md lacks the generated GPU table markers"
    assert block.group(1) == G.markdown_table(), "README's GPU table is stale: paste gpu_select.markdown_table()"


def test_a_pending_pods_own_placement_is_explained_from_its_spec():
    pod = {"spec": {"nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": IT, "operator": "In", "values": ["Standard_NC24ads_A100_v4", "Standard_X"]}]}]}}},
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": 2}}}]}}
    gpu_node = {"metadata": {"name": "n1", "labels": {"kubernetes.azure.com/accelerator": "nvidia",
                                                      IT: "Standard_ND96isr_H200_v5"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    cpu_node = {"metadata": {"name": "c1", "labels": {IT: "Standard_D4s_v5"}}, "status": {"allocatable": {}}}
    assert G.pod_placement_problem(pod, [gpu_node, cpu_node]) == (
        f"no node matches kubernetes.azure.com/accelerator=nvidia,{IT} in (Standard_NC24ads_A100_v4|Standard_X); "
        f"nodes with nvidia.com/gpu: n1 (kubernetes.azure.com/accelerator=nvidia, {IT}=Standard_ND96isr_H200_v5, "
        "8 nvidia.com/gpu)")
    gpu_node["metadata"]["labels"][IT] = "Standard_X"
    assert G.pod_placement_problem(pod, [gpu_node, cpu_node]) is None  # a node has every label: not a label problem
    assert G.pod_placement_problem(pod, [cpu_node]).endswith("; no node has nvidia.com/gpu allocatable")
