"""GPU selection and the Kueue pre-flight on the real local control plane (real kube-apiserver and scheduler).

Three extra KWOK nodes stand in for managed-cluster GPU nodes, labelled the way each platform labels
them (GKE `cloud.google.com/gke-accelerator`, Karpenter `karpenter.k8s.aws/instance-gpu-*`, AKS
`kubernetes.azure.com/accelerator` + VM size) and tainted `nvidia.com/gpu:NoSchedule` as GPU pools
usually are; they are fakes (no container runs), created by the fixture and deleted afterwards. The
real scheduler places the launcher's pods: each scheme's job lands on its node (the default GPU
toleration lets it), and a GPU no node has stays Pending with the scheduler's reason, which `submit`
and `status` explain by naming the selector and the GPU nodes' labels.

Kueue: its v0.17.0 CRDs (from the Go module) are applied by a fixture when the cluster lacks them and
removed afterwards (only the ones it created). No Kueue controller runs for these tests: they prove the
API-version discovery and the LocalQueue pre-flight, not admission.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest
import yaml

import kwok_support as ks
from crd_schema import kueue_crd_paths, kueue_schema_errors
from launcher_helpers import CONFIG, run_launcher

pytestmark = pytest.mark.cluster

SUFFIX = uuid.uuid4().hex[:5]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
FAKE_NODES = {
    "gke": (f"e2e-gke-{SUFFIX}", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                                  "cloud.google.com/gke-accelerator-count": "8"}),
    "karpenter": (f"e2e-karpenter-{SUFFIX}", {"karpenter.k8s.aws/instance-gpu-name": "a100",
                                              "karpenter.k8s.aws/instance-gpu-memory": "40960",
                                              "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                                              "node.kubernetes.io/instance-type": "p4d.24xlarge"}),
    "aks": (f"e2e-aks-{SUFFIX}", {"kubernetes.azure.com/accelerator": "nvidia",
                                  "node.kubernetes.io/instance-type": "Standard_ND96isr_H200_v5"}),
}
# (scheme, gpu_type) that the scheme's fake node carries
LANDS = [("gke", "H100-80GB", "pytorchjob"), ("karpenter", "A100-40GB", "pytorchjob"), ("aks", "H200", "pytorchjob"),
         ("gke", "H100-80GB", "rayjob")]


def _node(name: str, labels: dict) -> dict:
    capacity = {"cpu": "96", "memory": "1120Gi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "1Ti"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok", "e2e.grpo-launcher/gpusel": SUFFIX,
                                    **labels}},
            "spec": {"taints": [GPU_TAINT]},
            "status": {"capacity": capacity, "allocatable": capacity}}


@pytest.fixture(scope="module")
def platform_nodes(kube_cluster, kube_api):
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    names = []
    try:
        for name, labels in FAKE_NODES.values():
            core.create_node(_node(name, labels))
            names.append(name)
        for name in names:
            ks.wait_for(lambda n=name: any(c.type == "Ready" and c.status == "True"
                                           for c in core.read_node(n).status.conditions or []),
                        timeout=60, what=f"KWOK node {name} Ready")
        yield {scheme: name for scheme, (name, _) in FAKE_NODES.items()}
    finally:
        for name in names:
            core.delete_node(name)


def _pods(kube_api, ns: str) -> list:
    from kubernetes import client

    return client.CoreV1Api(kube_api).list_namespaced_pod(ns).items


def _gpu_pod(kube_api, ns: str, timeout: float = 90):
    """The job's GPU pod once the scheduler decided (bound to a node, or PodScheduled False)."""
    def decided():
        for p in _pods(kube_api, ns):
            if (p.metadata.labels or {}).get("grpo.launcher.io/role") != "gpu":
                continue
            conds = {c.type: c for c in p.status.conditions or []}
            if p.spec.node_name or (conds.get("PodScheduled") and conds["PodScheduled"].status == "False"):
                return p
        return None
    return ks.wait_for(decided, timeout=timeout, what=f"a scheduling decision for the GPU pod in {ns}")


@pytest.mark.parametrize(("scheme", "gpu_type", "backend"), LANDS, ids=lambda v: str(v))
def test_the_job_lands_on_the_node_of_its_platform(kube_cluster, kube_api, namespace, platform_nodes, tmp_path,
                                                     scheme, gpu_type, backend):
    ann = json.dumps({ks.POD_COMPLETE_DELAY: "600s"})  # keep the pods while we look
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, "--backend", backend,
                                 "--set", f"resources.gpu_label_scheme={scheme}",
                                 "--set", f"resources.gpu_type={gpu_type}",
                                 "--set", f"scheduling.pod_annotations={ann}"], kube_cluster, tmp_path)
    assert rc == 0, err
    assert "no node matches" not in err  # the pre-flight found the node
    pod = _gpu_pod(kube_api, namespace)
    assert pod.spec.node_name == platform_nodes[scheme], (pod.spec.node_name, pod.status.conditions)
    assert any(t.key == "nvidia.com/gpu" and t.operator == "Exists" for t in pod.spec.tolerations)


def test_a_gpu_no_node_has_stays_pending_and_submit_and_status_say_why(kube_cluster, kube_api, namespace,
                                                                      platform_nodes, tmp_path):
    sets = ["--set", "resources.gpu_label_scheme=gke", "--set", "resources.gpu_type=A100-80GB"]
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, *sets], kube_cluster, tmp_path)
    assert rc == 0, err
    gke_node = platform_nodes["gke"]
    assert "warning: no node matches cloud.google.com/gke-accelerator=nvidia-a100-80gb; nodes with nvidia.com/gpu:" \
        in err, err
    assert f"{gke_node} (cloud.google.com/gke-accelerator=nvidia-h100-80gb, 8 nvidia.com/gpu)" in err, err
    pod = _gpu_pod(kube_api, namespace)
    assert not pod.spec.node_name
    time.sleep(1)  # the scheduler's condition message is written with the condition
    rc, out, err = run_launcher(["status", pod.metadata.labels["app.kubernetes.io/instance"], "-n", namespace],
                                kube_cluster, tmp_path)
    assert rc == 0, err
    assert "Pending" in out and "Unschedulable" in out, out  # the scheduler's own reason
    assert "no node matches cloud.google.com/gke-accelerator=nvidia-a100-80gb; nodes with nvidia.com/gpu:" in out
    assert f"{gke_node} (cloud.google.com/gke-accelerator=nvidia-h100-80gb, 8 nvidia.com/gpu)" in out, out
    rc, out, err = run_launcher(["status", pod.metadata.labels["app.kubernetes.io/instance"], "-n", namespace,
                                 "-o", "json"], kube_cluster, tmp_path)
    gpu = [p for p in json.loads(out)["pods"] if p["placement"]]
    assert gpu and "cloud.google.com/gke-accelerator=nvidia-a100-80gb" in gpu[0]["placement"]


def test_aks_vm_size_in_a_node_affinity_stays_pending_with_the_expression_named(kube_cluster, kube_api, namespace,
                                                                                platform_nodes, tmp_path):
    """AKS's PCIe A100 comes in three VM sizes: a nodeAffinity `In`, named as such when none matches."""
    sets = ["--set", "resources.gpu_label_scheme=aks", "--set", "resources.gpu_type=A100-80GB-PCIE"]
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, *sets], kube_cluster, tmp_path)
    assert rc == 0, err
    expr = ("node.kubernetes.io/instance-type in "
            "(Standard_NC24ads_A100_v4|Standard_NC48ads_A100_v4|Standard_NC96ads_A100_v4)")
    assert f"no node matches kubernetes.azure.com/accelerator=nvidia,{expr}" in err, err
    pod = _gpu_pod(kube_api, namespace)
    assert not pod.spec.node_name
    rc, out, err = run_launcher(["status", pod.metadata.labels["app.kubernetes.io/instance"], "-n", namespace],
                                kube_cluster, tmp_path)
    assert expr in out and f"{platform_nodes['aks']} (kubernetes.azure.com/accelerator=nvidia, " \
        "node.kubernetes.io/instance-type=Standard_ND96isr_H200_v5, 8 nvidia.com/gpu)" in out, out


# --- Kueue: API version discovery and the LocalQueue pre-flight (CRDs only, no controller) ----------


@pytest.fixture(scope="module")
def kueue_crds(kube_cluster, kube_api):
    """Kueue v0.17.0's CRDs on the cluster: applied when missing (and then removed), else left as found."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(kube_api)
    created = []
    try:
        for path in kueue_crd_paths():
            crd = yaml.safe_load(path.read_text())
            try:
                ext.read_custom_resource_definition(crd["metadata"]["name"])
                continue  # someone else's Kueue: use it, never touch it
            except ApiException as exc:
                if exc.status != 404:
                    raise
            ext.create_custom_resource_definition(crd)
            created.append(crd["metadata"]["name"])
        for name in created:
            ks.wait_for(lambda n=name: any(c.type == "Established" and c.status == "True" for c in
                                           ext.read_custom_resource_definition(n).status.conditions or []),
                        timeout=60, what=f"CRD {name} established")
        yield created
    finally:
        for name in created:
            ext.delete_custom_resource_definition(name)


def _kueue_obj(kind: str, name: str, spec: dict, namespace: str | None = None) -> dict:
    md = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": md, "spec": spec}


def test_kueue_version_is_discovered_and_a_missing_localqueue_refuses_submit(kube_cluster, kube_api, namespace,
                                                                           kueue_crds, tmp_path):
    from kubernetes import client

    from launcher.kube import Kube
    from launcher.kube import kueue as KQ

    kube = Kube(kube_cluster.api_client(), namespace)
    assert KQ.served_version(kube, "localqueues") == "v1beta2"  # v0.17.0 serves v1beta1 and v1beta2: the newer wins
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, "--queue", "no-such-queue"], kube_cluster, tmp_path)
    assert rc == 3, err
    assert (f"error: Kueue LocalQueue no-such-queue does not exist in namespace {namespace} "
            f"(kueue.x-k8s.io/v1beta2; kubectl get localqueues -n {namespace}); nothing was created") in err
    co = client.CustomObjectsApi(kube_api)
    assert co.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"] == []
    assert [c.metadata.name for c in client.CoreV1Api(kube_api).list_namespaced_config_map(namespace).items
            if c.metadata.name != "kube-root-ca.crt"] == []

    # A LocalQueue (validated against the v0.17.0 CRD, then by the API server) pointing at a ClusterQueue
    # that does not exist, so that a Kueue controller, if one runs, does not admit the job either.
    lq = _kueue_obj("LocalQueue", "gpus", {"clusterQueue": f"e2e-none-{SUFFIX}"}, namespace)
    assert kueue_schema_errors(lq) == []
    co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "localqueues", lq)
    rc, out, err = run_launcher(["submit", CONFIG, "-n", namespace, "--queue", "gpus"], kube_cluster, tmp_path)
    assert rc == 0, err
    jobs = co.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"]
    assert len(jobs) == 1 and jobs[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpus"
    assert jobs[0]["spec"]["runPolicy"]["suspend"] is True


def test_the_test_kueue_objects_validate_against_the_v0_17_crds():
    """The shapes the tests (and the docs) use are valid v1beta2 objects; a wrong field is caught."""
    flavor = _kueue_obj("ResourceFlavor", "a100", {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}})
    cq = _kueue_obj("ClusterQueue", "grpo", {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": "96"},
                                                   {"name": "memory", "nominalQuota": "1120Gi"},
                                                   {"name": "nvidia.com/gpu", "nominalQuota": "2"}]}]}]})
    assert kueue_schema_errors(flavor) == [] and kueue_schema_errors(cq) == []
    bad = _kueue_obj("LocalQueue", "x", {"clusterQueues": "grpo"}, "ns")
    assert kueue_schema_errors(bad)
