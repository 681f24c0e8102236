"""`launcher doctor` against the local control plane.

Static checks on the KWOK A100 nodes: all green for grpo-exp3; a queue without Kueue; a GPU type no node
has; a ServiceAccount missing a permission. `--smoke` (marker `realnode`): a real smoke job on the real
kubelet node with the CPU image (configs/smoke-cpu.yaml): all green; /dev/shm too small; a pod that cannot
reach the other (an iptables rule on the pod bridge, tests/e2e/netblock.py). The `realnode` tests FAIL
when the real node, the image or the smoke config is missing: they never skip.
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
import netblock
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


# --- --smoke on the real node ---------------------------------------------------------------------------------


def require_real_node(info) -> None:
    """Fail (never skip) when what the smoke tests need is missing."""
    if not SMOKE_CONFIG.is_file():
        pytest.fail(f"{SMOKE_CONFIG.relative_to(REPO)} is missing (it comes with the smoke workload, branch `smoke`)")
    if not netblock.real_nodes(info):
        pytest.fail(f"the local cluster has no real kubelet node (label {netblock.REAL_NODE_LABEL}); "
                    "the --smoke tests need it and the CPU image imported on it")


def _no_doctor_jobs_left(info, ns) -> None:
    left = info.kubectl("get", "pytorchjobs,rayjobs", "-n", ns, "-l", "app.kubernetes.io/part-of=grpo-launcher",
                        "-o", "name").stdout.split()
    assert left == [], left


@pytest.mark.realnode
def test_smoke_all_green(kube_cluster, namespace, tmp_path):
    require_real_node(kube_cluster)
    rc, found, text = doctor(kube_cluster, namespace, tmp_path, "--smoke", "--timeout", "420",
                             config=SMOKE_CONFIG, timeout=600)
    assert rc == 0, text
    for name in ("smoke: pods", "smoke: shm", "smoke: result"):
        assert found[name].startswith("✓"), text
    assert any(n in found for n in ("smoke: allreduce", "smoke: nccl")), text
    assert not any(line.startswith("✗") for line in found.values()), text
    _no_doctor_jobs_left(kube_cluster, namespace)


@pytest.mark.realnode
def test_smoke_shm_too_small(kube_cluster, namespace, tmp_path):
    require_real_node(kube_cluster)
    rc, found, text = doctor(kube_cluster, namespace, tmp_path, "--smoke", "--timeout", "420",
                             "--set", "resources.shm_size=16Mi", "--set", "smoke.min_shm=256Mi",
                             config=SMOKE_CONFIG, timeout=600)
    assert rc == 1, text
    line = found["smoke: shm"]
    assert line.startswith("✗ smoke: shm") and "raise resources.shm_size" in line, text
    assert found["smoke: result"].startswith("✗"), text
    _no_doctor_jobs_left(kube_cluster, namespace)


@pytest.mark.realnode
def test_smoke_pod_cannot_reach_the_other(kube_cluster, namespace, tmp_path):
    require_real_node(kube_cluster)
    bridge = netblock.pod_bridge(kube_cluster)
    with netblock.block_port(netblock.PYTORCHJOB_MASTER_PORT, bridge=bridge, tag=f"grpo-doctor-e2e-{namespace}"):
        rc, found, text = doctor(kube_cluster, namespace, tmp_path, "--smoke", "--timeout", "420",
                                 "--set", "resources.nodes=2", "--set", "smoke.connect_timeout_s=20",
                                 config=SMOKE_CONFIG, timeout=600)
    assert rc == 1, text
    line = found.get("smoke: allreduce") or found.get("smoke: result", "")
    assert line.startswith("✗"), text
    assert "reach each other" in line or "allreduce" in line, text
    _no_doctor_jobs_left(kube_cluster, namespace)
