"""Scale-out through the operators on the local control plane (two 8×A100 KWOK nodes).

A 2-node grpo-exp3 variant on each backend is accepted, its GPU pods land on different nodes, and
the job's lifecycle completes; a 3-node request (two GPU nodes exist) stays Pending, and
`launcher status` shows why.
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import CONFIG, run_launcher

pytestmark = pytest.mark.cluster

TWO_NODES = ["--set", "resources.nodes=2"]  # exp3's batch 8 × n 2 = 16 splits over 4 GPUs


def _args(ns: str, backend: str, delay: str, *sets: str) -> list[str]:
    ann = json.dumps({ks.POD_COMPLETE_DELAY: delay})
    return ["submit", CONFIG, "-n", ns, "--backend", backend, "--set", f"scheduling.pod_annotations={ann}", *sets]


def _gpu_pods(kube_api, ns: str) -> list:
    from kubernetes import client

    pods = client.CoreV1Api(kube_api).list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=trainer")
    return [p for p in pods.items
            if any((c.resources.limits or {}).get("nvidia.com/gpu") for c in p.spec.containers)]


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_two_node_run_spans_two_nodes_and_completes(kube_cluster, kube_api, namespace, tmp_path, backend):
    rc, out, err = run_launcher(_args(namespace, backend, "15s", *TWO_NODES), kube_cluster, tmp_path)
    assert rc == 0, err
    job = next(p.name for p in tmp_path.iterdir())

    def two_bound():
        pods = [p for p in _gpu_pods(kube_api, namespace) if p.spec.node_name]
        return pods if len(pods) == 2 else None

    pods = ks.wait_for(two_bound, timeout=90, what="two bound GPU pods")
    nodes = {p.spec.node_name for p in pods}
    assert nodes == {"kwok-a100-0", "kwok-a100-1"}, nodes
    for p in pods:
        assert p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    rc, out, err = run_launcher(["wait", job, "-n", namespace, "--timeout", "240"], kube_cluster, tmp_path,
                                timeout=300)
    assert rc == 0, out + err


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_three_nodes_on_two_stays_pending_with_reason(kube_cluster, kube_api, namespace, tmp_path, backend):
    sets = ["--set", "resources.nodes=3", "--set", "data.train_batch_size=6", "--set", "actor.ppo_mini_batch_size=6"]
    rc, out, err = run_launcher(_args(namespace, backend, "600s", *sets), kube_cluster, tmp_path)
    assert rc == 0, err
    job = next(p.name for p in tmp_path.iterdir())

    def pending_reason():
        rc, out, err = run_launcher(["status", job, "-n", namespace], kube_cluster, tmp_path)
        return out if "anti-affinity" in out else None

    out = ks.wait_for(pending_reason, timeout=120, interval=3, what="the scheduler's anti-affinity reason in status")
    assert "Pending" in out or "Unschedulable" in out, out
    bound = [p for p in _gpu_pods(kube_api, namespace) if p.spec.node_name]
    assert len(bound) == 2 and len({p.spec.node_name for p in bound}) == 2
