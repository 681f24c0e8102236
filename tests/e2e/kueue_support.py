"""The real Kueue of the local cluster (hack/cluster/kueue.sh) for end-to-end tests.

`ensure_kueue()` runs up.sh with GRPO_KUEUE=1, which starts Kueue when it is not running and fails when it is
not built: a test that needs Kueue fails rather than skips without it. The ClusterQueue `grpo-a100` (3 GPUs
of flavor a100: one 2-GPU experiment fits, two do not) is cluster-wide, so the tests that use it must not
overlap (they are in one module, run in order); each test namespace gets its own LocalQueue. A test elsewhere
that sends a run through Kueue uses a ClusterQueue of its own (`cluster_queue`): the tests run on several
workers at once, and a run of theirs holding grpo-a100's quota would keep the Kueue tests' runs queued.
"""
from __future__ import annotations

import json
import os
import subprocess

import kwok_support as ks

CLUSTER_QUEUE = "grpo-a100"
GPU_QUOTA = 3
LOCAL_QUEUE = "grpo"
PRIORITY_CLASSES = {"grpo-e2e-high": 100000, "grpo-e2e-low": 100}


def ensure_kueue() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["GRPO_KUEUE"] = "1"
    proc = subprocess.run([str(ks.HACK_CLUSTER / "up.sh")], capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/cluster/up.sh with GRPO_KUEUE=1 failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def apply(info: ks.ClusterInfo, obj: dict) -> None:
    info.kubectl("apply", "--server-side", "--field-manager=grpo-e2e", "-f", "-", input=json.dumps(obj))


def local_queue(info: ks.ClusterInfo, ns: str, name: str = LOCAL_QUEUE, cluster_queue: str = CLUSTER_QUEUE) -> None:
    apply(info, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": cluster_queue}})


def cluster_queue(info: ks.ClusterInfo, name: str, gpus: int) -> None:
    """A ClusterQueue `name` of flavor a100 with `gpus` GPUs (CPU and memory of two A100 nodes), any namespace."""
    apply(info, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                     "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                     "flavors": [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": "192"},
                                                               {"name": "memory", "nominalQuota": "2240Gi"},
                                                               {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}]}]}})


def delete_cluster_queue(info: ks.ClusterInfo, name: str) -> None:
    info.kubectl("delete", "clusterqueue", name, "--wait=false", "--ignore-not-found", check=False)


def priority_classes(info: ks.ClusterInfo) -> None:
    for name, value in PRIORITY_CLASSES.items():
        apply(info, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                     "value": value, "preemptionPolicy": "PreemptLowerPriority",
                     "description": "grpo-launcher e2e: Kueue pre-emption test"})


def workload(info: ks.ClusterInfo, ns: str, job_uid: str) -> dict | None:
    out = info.kubectl("get", "workloads.v1beta2.kueue.x-k8s.io", "-n", ns, "-l", f"kueue.x-k8s.io/job-uid={job_uid}",
                       "-o", "json").stdout
    items = json.loads(out)["items"]
    return items[0] if items else None


def condition(wl: dict | None, kind: str) -> dict:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return {}


REAL_FLAVOR = "grpo-real-cpu"


def real_cpu_cluster_queue(info: ks.ClusterInfo, name: str, cpu: str, memory: str) -> None:
    """A ClusterQueue `name` over the real nodes' CPU and memory (ResourceFlavor REAL_FLAVOR: the real nodes' label),
    `cpu`/`memory` of quota: sized by the caller to admit as many CPU-training runs at a time as it wants."""
    apply(info, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": REAL_FLAVOR},
                 "spec": {"nodeLabels": {"grpo.launcher.io/node-kind": "real"}}})
    apply(info, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{
                     "coveredResources": ["cpu", "memory"],
                     "flavors": [{"name": REAL_FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                                    {"name": "memory", "nominalQuota": memory}]}]}]}})
