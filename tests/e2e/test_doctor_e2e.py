"""`launcher doctor` against the local control plane.

Static checks on the KWOK A100 nodes: all green for grpo-exp3; a queue without Kueue; a GPU type no node
has; a ServiceAccount missing a permission. `--smoke` (marker `realnode`): a real smoke job on the two real
kubelet nodes grpo-node-0/1 with the CPU image (configs/smoke-cpu.yaml): all green; /dev/shm smaller than
smoke.min_shm; two pods (one per node) that cannot reach each other's rendezvous port (an iptables DROP in
the host's FORWARD chain, tests/e2e/netblock.py). The `realnode` tests FAIL when the real nodes, the image
or the smoke config is missing: they never skip.
"""
from __future__ import annotations

import json
import re

import pytest

import kwok_support as ks
import netblock
import realnode as rn
from launcher_helpers import CONFIG, REPO, run_launcher
from rbac_support import apply, launcher_user

pytestmark = pytest.mark.cluster
SMOKE_CONFIG = REPO / "configs" / "smoke-cpu.yaml"
STATIC = ["api-server", "namespace", "backend", "kueue", "gpu-nodes", "rbac"]


def checks(out: str) -> dict[str, str]:
    """{check name: its line} from doctor's text output."""
    found = {}
    for ln in out.splitlines():
        if ln[:1] in ("✓", "✗", "!"):
            found[ln[2:].split("  ")[0].strip()] = ln
    return found


def doctor(info, ns, tmp_path, *extra, config=CONFIG, timeout=120):
    rc, out, err = run_launcher(["doctor", str(config), "-n", ns, *extra], info, tmp_path / "runs", timeout=timeout)
    return rc, checks(out), out + err


def test_static_checks_green_for_grpo_exp3(kube_cluster, namespace, tmp_path):
    rc, found, text = doctor(kube_cluster, namespace, tmp_path)
    assert rc == 0, text
    assert list(found) == STATIC, text
    assert all(line.startswith("✓") for line in found.values()), text
    assert "Kubernetes v1." in found["api-server"]
    assert "pytorchjobs.kubeflow.org v1 served" in found["backend"] and "rayjobs.ray.io v1" in found["backend"]
    assert "kwok-a100-0" in found["gpu-nodes"] and "kwok-a100-1" in found["gpu-nodes"]
    assert "all " in found["rbac"] and "permissions the launcher uses are granted" in found["rbac"]
    # JSON says the same
    rc, out, err = run_launcher(["doctor", CONFIG, "-n", namespace, "-o", "json"], kube_cluster, tmp_path / "runs")
    doc = json.loads(out)
    assert rc == 0 and doc["exit_code"] == 0 and [c["name"] for c in doc["checks"]] == STATIC, out + err


def test_queue_without_kueue_names_it(kube_cluster, namespace, tmp_path):
    served = kube_cluster.kubectl("api-versions").stdout.split()
    rc, found, text = doctor(kube_cluster, namespace, tmp_path, "--set", "scheduling.queue=gpu-queue")
    assert rc == 1, text
    line = found["kueue"]
    assert line.startswith("✗ kueue"), text
    if any(v.startswith("kueue.x-k8s.io/") for v in served):  # a cluster that grew Kueue: the queue is missing
        assert f"LocalQueue gpu-queue does not exist in namespace {namespace}" in line
    else:
        assert "scheduling.queue is gpu-queue but Kueue is not installed" in line and "install Kueue" in line
    assert all(found[c].startswith("✓") for c in STATIC if c != "kueue"), text


def test_no_matching_gpu_node_names_the_a100_nodes_and_their_label(kube_cluster, namespace, tmp_path):
    rc, found, text = doctor(kube_cluster, namespace, tmp_path, "--set", "resources.gpu_type=H200")
    assert rc == 1, text
    line = found["gpu-nodes"]
    assert line.startswith("✗ gpu-nodes") and "no node matches nvidia.com/gpu.product=NVIDIA-H200" in line
    for n in ("kwok-a100-0", "kwok-a100-1"):
        assert f"{n} (nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB, 8 nvidia.com/gpu)" in line, line
    assert "--set resources.gpu_type=A100-80GB" in line


def test_serviceaccount_missing_a_permission(kube_cluster, namespace, tmp_path):
    info, ns = kube_cluster, namespace
    user, objs, _ = launcher_user(info, ns, "doctor-user", tmp_path / "kubeconfig")
    rc, found, text = doctor(user, ns, tmp_path)
    assert rc == 0, text
    assert found["rbac"].startswith("✓ rbac"), text
    # the rendered ClusterRole has no cluster-wide pod list: free GPUs cannot be counted, capacity can
    assert found["gpu-nodes"][:1] in ("✓", "!"), text

    role = objs[0]
    for rule in role["rules"]:
        if rule["resources"] == ["pytorchjobs"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    apply(info, [role])
    rc, found, text = ks.wait_for(lambda: (lambda r: r if r[0] == 1 else None)(doctor(user, ns, tmp_path)),
                                  timeout=60, interval=2, what="doctor to see the changed Role")
    line = found["rbac"]
    assert line.startswith("✗ rbac"), text
    assert f"missing: create kubeflow.org/pytorchjobs in {ns}" in line
    assert f"`launcher rbac -n {ns} --serviceaccount {ns}:doctor-user` renders" in line


# --- --smoke on the real nodes ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_nodes(kube_cluster):
    """Both real nodes Ready with the CPU image imported, and the smoke config: else the test FAILS (never skips)."""
    if not SMOKE_CONFIG.is_file():
        pytest.fail(f"{SMOKE_CONFIG.relative_to(REPO)} is missing (it comes with the smoke workload)")
    try:
        rn.ensure_real_node(kube_cluster)  # up.sh with GRPO_REAL_NODE=1 (idempotent), then Ready + image on each
    except RuntimeError as exc:
        pytest.fail(f"the --smoke tests need the real nodes {', '.join(rn.NODES)} with {rn.CPU_IMAGE}: {exc}")
    names = sorted(n["metadata"]["name"] for n in netblock.real_nodes(kube_cluster))
    if names != sorted(rn.NODES):
        pytest.fail(f"real nodes (label {netblock.REAL_NODE_LABEL}): {names}, expected {list(rn.NODES)}")
    return kube_cluster


def _no_doctor_jobs_left(info, ns) -> None:
    def left():
        return info.kubectl("get", "pytorchjobs,rayjobs", "-n", ns, "-l", "app.kubernetes.io/part-of=grpo-launcher",
                            "-o", "name").stdout.split()
    ks.wait_for(lambda: not left(), timeout=60, interval=2, what=f"doctor's smoke job in {ns} to be deleted")


def smoke(info, ns, tmp_path, *sets: str):
    extra = [a for s in sets for a in ("--set", s)]
    return doctor(info, ns, tmp_path, "--smoke", "--timeout", "420", *extra, config=SMOKE_CONFIG, timeout=600)


@pytest.mark.realnode
@pytest.mark.smallpods
def test_smoke_all_green(real_nodes, namespace, tmp_path):
    rc, found, text = smoke(real_nodes, namespace, tmp_path)
    assert rc == 0, text
    assert list(found)[:len(STATIC)] == ["api-server", "namespace", "backend", "kueue", "nodes", "rbac"], text
    # one pod (resources.nodes 1): every check the workload runs there, in doctor's order; CPU: no NCCL
    assert [n for n in found if n.startswith("smoke: ")] == [
        "smoke: pods", "smoke: user", "smoke: root_readonly", "smoke: writable", "smoke: shm_size", "smoke: dataset",
        "smoke: verl_config", "smoke: ray_init", "smoke: ray_nodes", "smoke: ray_task", "smoke: rendezvous",
        "smoke: allreduce", "smoke: steps", "smoke: result"], text
    assert all(line.startswith("✓") for line in found.values()), text
    assert "master-0 on grpo-node-" in found["smoke: pods"], text
    assert "tmp /tmp; home " in found["smoke: writable"] and "storage /workspace" in found["smoke: writable"], text
    assert "(smoke.min_shm 128Mi = 128.0MiB; resources.shm_size 256Mi)" in found["smoke: shm_size"], text
    assert "every pod reported ok (master-0 single-node)" in found["smoke: result"], text
    _no_doctor_jobs_left(real_nodes, namespace)


@pytest.mark.realnode
@pytest.mark.smallpods
def test_smoke_shm_too_small(real_nodes, namespace, tmp_path):
    """The master exits 1 on the failed check; training-operator v1.9 then deletes its pod and may create it
    again after the job is Failed. Doctor still names resources.shm_size (from the incarnation that ran)."""
    rc, found, text = smoke(real_nodes, namespace, tmp_path, "smoke.min_shm=1Gi")  # /dev/shm stays 256Mi
    assert rc == 1, text
    line = found["smoke: shm_size"]
    assert line.startswith("✗ smoke: shm_size"), text
    assert "master-0: /dev/shm " in line, text  # the size statvfs saw in the pod (the 256Mi emptyDir)
    assert "(smoke.min_shm 1Gi = 1024.0MiB; resources.shm_size 256Mi)" in line, text
    assert "fix: raise resources.shm_size (now 256Mi) to at least smoke.min_shm (1Gi)" in line, text
    assert found["smoke: result"].startswith("✗") and "FAIL shm_size" in found["smoke: result"], text
    # only /dev/shm is wrong: the other in-pod checks still pass
    for name in ("smoke: user", "smoke: writable", "smoke: dataset", "smoke: allreduce"):
        assert found[name].startswith("✓"), text
    _no_doctor_jobs_left(real_nodes, namespace)


@pytest.mark.realnode
@pytest.mark.smallpods
@pytest.mark.wholenodes  # its FORWARD rule drops every pod's PyTorchJob rendezvous port: no 2-node run meanwhile
def test_smoke_pod_cannot_reach_the_other(real_nodes, namespace, tmp_path):
    """Two pods, one per real node; TCP to the rendezvous port (MASTER_PORT) dropped between pod addresses."""
    info, port = real_nodes, netblock.PYTORCHJOB_MASTER_PORT
    tag = f"grpo-doctor-e2e-{namespace}"
    with netblock.block_port(port, tag=tag, network=netblock.pod_network(info)):  # before the submit
        rc, found, text = smoke(info, namespace, tmp_path, "resources.nodes=2", "smoke.connect_timeout_s=60")
    assert not netblock.blocked(port, tag, netblock.pod_network(info))
    assert rc == 1, text
    pods = found["smoke: pods"]
    assert pods.startswith("✓") and "grpo-node-0" in pods and "grpo-node-1" in pods, text  # one pod per node
    line = found["smoke: rendezvous"]
    assert line.startswith("✗ smoke: rendezvous"), text
    assert "the pods cannot reach each other" in line and f":{port}" in line, text
    assert f"fix: the pods cannot reach each other: allow pod-to-pod TCP port {port}" in line, text
    assert "NetworkPolicies" in line, text
    assert "smoke: allreduce" not in found, text  # never got that far
    assert "smoke: nccl_allreduce" not in found, text  # CPU pods: not expected, no warning
    assert found["smoke: result"].startswith("✗"), text
    _no_doctor_jobs_left(info, namespace)


# --- --rehearse on the real nodes: the experiment itself, two real verl steps of the built-in tiny model ------------

CPU_CONFIG = REPO / "configs" / "grpo-exp3-cpu.yaml"
STAGES = ["rehearse: pods", "rehearse: steps", "rehearse: rollout", "rehearse: reward", "rehearse: update",
          "rehearse: weight_sync", "rehearse: checkpoint", "rehearse: result"]


@pytest.mark.realnode
def test_rehearse_trains_two_real_steps_and_checks_each_stage(real_nodes, namespace, tmp_path):
    rc, found, text = doctor(real_nodes, namespace, tmp_path, "--rehearse", config=CPU_CONFIG, timeout=1800)
    assert rc == 0, text
    assert [n for n in found if n.startswith("rehearse: ")] == STAGES, text
    assert all(found[n].startswith("✓") for n in STAGES), text
    assert "rehearsing grpo-exp3-cpu as grpo-exp3-cpu-rehearse: model builtin:tiny-qwen2, 2 steps" in text, text
    assert "2 real verl steps of builtin:tiny-qwen2 (step 1 " in found["rehearse: steps"], text
    assert "checkpoint on the run's volume: global_step_2 saved in " in found["rehearse: checkpoint"], text
    # ...and the files are there: the entrypoint looked at the volume after verl exited (every rank's actor files and
    # data.pt), not only verl's save timing
    saved = re.compile(r"global_step_2 on the volume: complete \(\d+ files, [\d.]+ MB\)")
    assert saved.search(found["rehearse: checkpoint"]), text
    assert "tokens per response" in found["rehearse: rollout"] and "pg_loss " in found["rehearse: update"], text
    assert "master-0 on grpo-node-" in found["rehearse: pods"], text
    _no_doctor_jobs_left(real_nodes, namespace)


@pytest.mark.realnode
def test_rehearse_names_the_setting_verl_refuses_and_the_fix(real_nodes, namespace, tmp_path):
    """A verl override with a key verl does not have: the rehearsal fails in the pod, at verl's own Hydra compose,
    and doctor names the cause and the fix (the CLI checks the syntax only when verl is not installed beside it)."""
    rc, found, text = doctor(real_nodes, namespace, tmp_path, "--rehearse", "--verl",
                             "actor_rollout_ref.actor.no_such_key=1", "--set", "run_policy.backoff_limit=0",
                             config=CPU_CONFIG, timeout=900)
    assert rc == 1, text
    line = found["rehearse: result"]
    assert line.startswith("✗ rehearse: result") and "verl refused the config" in line and "no_such_key" in line, text
    assert "fix: fix the item verl names" in line, text
    assert found["rehearse: steps"].startswith("✗") and "0 of 2 steps logged" in found["rehearse: steps"], text
    _no_doctor_jobs_left(real_nodes, namespace)
