"""A real node lost mid-run (issue 29, item 1): resume from a real verl checkpoint on the other node.

The run (grpo-exp3-cpu, 1 node, `save_freq: 3`, `run_policy.backoff_limit: 2`) starts on grpo-node-1 (node 0 is
cordoned until the pod is placed). After verl wrote global_step_3, node 1 dies as a machine does: its kubelet is
killed, then the trainer's processes, and the Node object is deleted (what a cloud's node controller does for a
vanished VM). Kubernetes' own pod garbage collector removes the orphaned pod, the training operator creates it again,
the scheduler puts it on grpo-node-0, the entrypoint picks global_step_3 from the shared volume, and verl resumes.

The file runs alone after the shared cluster lane (Makefile E2E_LAST): a deleted node would take other tests' pods
with it. Node 1 is restarted afterwards (its kubelet registers it again).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

import kwok_support as ks
import realnode as rn
from real_runs import CONFIG, Following, check_resumed, checkpointed, logged_steps, master, sets_for
from real_runs import real_node, volume  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
LOST, OTHER = rn.NODES[1], rn.NODES[0]


def kill_kubelet(node: str) -> None:
    """SIGKILL the node's kubelet (hack/cluster/node.sh records its pid): no more status, no more restarts."""
    pid = int((ks.cluster_dir() / "pids" / f"kubelet-{node.rsplit('-', 1)[-1]}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{node}'s kubelet (pid {pid}) outlived SIGKILL")


def test_a_real_node_lost_mid_run_the_pod_comes_back_on_the_other_node_and_resumes(real_node, namespace, volume,
                                                                                   tmp_path):
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    steps, save = 9, 3
    sets = sets_for(steps, f"trainer.save_freq={save}", "run_policy.backoff_limit=2")
    spec = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets])
    run = runs / spec.job_name
    info.kubectl("cordon", OTHER)
    try:
        follower = Following(info, ns, runs, sets)
        with follower:
            first = rn.wait_pod(info, ns, lambda p: p["spec"].get("nodeName"), timeout=300, what="the trainer placed",
                                selector="training.kubeflow.org/replica-type=master")
            info.kubectl("uncordon", OTHER)
            assert first["spec"]["nodeName"] == LOST, first["spec"]
            ks.wait_for(lambda: checkpointed(volume, save) and save in logged_steps(run),
                        timeout=900, interval=1, what=f"verl's global_step_{save} checkpoint and step {save}'s line")
            pod = master(info, ns)
            # the machine dies: its agent first (nothing restarts the container), then every process of the trainer
            kill_kubelet(LOST)
            rn.kill_container(pod)
            info.kubectl("delete", "node", LOST)
            again = rn.wait_pod(info, ns, lambda p: p["metadata"]["uid"] != pod["metadata"]["uid"]
                                and p["spec"].get("nodeName"), timeout=600, what="the trainer's pod created again",
                                selector="training.kubeflow.org/replica-type=master")
            assert again["spec"]["nodeName"] == OTHER, again["spec"]
            rc, err = follower.wait(timeout=1200)
        assert rc == 0, err[-4000:]
    finally:
        info.kubectl("uncordon", OTHER, check=False)
        rn.ensure_real_node(info)  # node 1's kubelet again: it registers the node anew (labels, taint)

    check_resumed(run, volume, steps, save)
    placed = json.loads((run / "pods.json").read_text())["pods"]  # where it ran: the report's placement
    assert placed[again["metadata"]["name"]] == {"node": OTHER, "simulated": False, "moved_from": [LOST]}, placed
    assert f"on real node {LOST}: Real training" in err and f"on real node {OTHER}: Real training" in err, err[-3000:]
