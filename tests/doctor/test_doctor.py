"""`launcher doctor`: every check's pass and fail paths, its exit codes, and its output, against a recording
fake API server (the real `Kube` underneath) or pure inputs."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kube_fakes import CLI_NS, FakeApiServer, cli_api, kubeconfig_for  # noqa: F401 - cli_api: fixture `api`
from launcher.doctor import check as C
from launcher.doctor import nodes as N
from launcher.doctor.smoke import doctor_name
from launcher.cli.main import main
from launcher.spec.load import load_spec
from launcher.render.rbac import PERMISSIONS

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
NS = CLI_NS
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
A100 = "NVIDIA-A100-SXM4-80GB"


def node(name: str, product: str | None = A100, gpus: int = 8, taints=None, cpu="96", memory="1120Gi", **extra):
    labels = {"kubernetes.io/hostname": name}
    if product:
        labels["nvidia.com/gpu.product"] = product
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    spec = {"taints": taints} if taints else {}
    spec.update(extra)
    return {"metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_pod(node_name: str, gpus: int, phase: str = "Running", cpu="1", memory="1Gi") -> dict:
    return {"metadata": {"name": f"p-{node_name}-{gpus}-{phase}"}, "spec": {"nodeName": node_name, "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}}}]},
        "status": {"phase": phase}}


class Cluster:
    """A healthy cluster on the fake API server; tests break one thing at a time."""

    def __init__(self, api: FakeApiServer):
        self.api = api
        self.denied: set[tuple[str, str, str]] = set()  # (verb, group, resource[/sub])
        self.user = "system:serviceaccount:team-a:bot"
        self.nodes = [node("gpu-0"), node("gpu-1")]
        self.pods: list[dict] = []
        self.groups = {"kubeflow.org": ["v1"], "ray.io": ["v1"]}
        self.resources = {("kubeflow.org", "v1"): ["pytorchjobs", "pytorchjobs/status"],
                          ("ray.io", "v1"): ["rayjobs", "rayclusters"]}
        api.routes[("GET", "/version")] = (200, {"gitVersion": "v1.35.4", "platform": "linux/amd64"})
        api.routes[("GET", f"/api/v1/namespaces/{NS}")] = (200, {"metadata": {"name": NS}})
        api.routes[("GET", "/apis")] = (200, lambda q, b: {"groups": [
            {"name": g, "versions": [{"version": v} for v in vs], "preferredVersion": {"version": vs[0]}}
            for g, vs in self.groups.items()]})
        api.routes[("GET", "/api/v1/nodes")] = (200, lambda q, b: {"items": self.nodes})
        api.routes[("GET", "/api/v1/pods")] = (200, lambda q, b: {"items": self.pods})
        api.routes[("POST", SSAR)] = (201, self._review)
        api.routes[("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews")] = (
            201, lambda q, b: {"status": {"userInfo": {"username": self.user}}})
        self.publish()

    def publish(self) -> None:
        for (g, v), names in self.resources.items():
            self.api.routes[("GET", f"/apis/{g}/{v}")] = (200, {"resources": [{"name": n} for n in names]})

    def _review(self, q, body):
        a = json.loads(body)["spec"]["resourceAttributes"]
        res = a["resource"] + (f"/{a['subresource']}" if a.get("subresource") else "")
        return {"status": {"allowed": (a["verb"], a["group"], res) not in self.denied}}



@pytest.fixture
def cluster(api):
    return Cluster(api)


def doctor(capsys, *args: str) -> tuple[int, dict[str, str], str]:
    """Run the verb; (exit code, {check name: its output line}, all stdout)."""
    rc = main(["doctor", CONFIG, "-n", NS, *args])
    out = capsys.readouterr().out
    lines = {}
    for ln in out.splitlines():
        if ln[:1] in ("✓", "✗", "!"):
            lines[ln[2:].split("  ")[0].strip()] = ln
    return rc, lines, out


# --- exit codes, bad input, output format ---------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["doctor", CONFIG, "--set", "nonsense.key=1"],
    ["doctor", CONFIG, "--set", "rollout.n=0"],
    ["doctor", "configs/does-not-exist.yaml"],
    ["doctor", CONFIG, "-n", "Not_A_Namespace"],
    ["doctor", CONFIG, "-o", "yaml"],
    ["doctor", CONFIG, "--smoke", "--set", "smoke.steps=0"],  # the smoke job's own section, checked up front
    ["doctor", CONFIG, "--smoke", "--set", "smoke.min_shm=lots"],
    ["doctor", CONFIG, "--set", "resources.gpus_per_node=0"],  # CPU pods only with workload smoke
])
def test_bad_input_exits_2_without_any_request(api, argv, capsys):
    assert main(argv) == 2
    assert api.connections == 0 and api.requests == []


def test_healthy_cluster_every_check_passes_in_order(cluster, capsys):
    rc, lines, out = doctor(capsys)
    assert rc == 0, out
    assert list(lines) == ["api-server", "namespace", "backend", "kueue", "gpu-nodes", "rbac"]
    assert all(ln.startswith("✓") for ln in lines.values()), out
    assert "Kubernetes v1.35.4" in lines["api-server"]
    assert "pytorchjobs.kubeflow.org v1 served; also served: rayjobs.ray.io v1, rayclusters.ray.io v1" \
        in lines["backend"]
    assert "not used (scheduling.queue unset); Kueue not installed" in lines["kueue"]
    assert "1 pod(s) × (2 nvidia.com/gpu, 16 CPU, 128Gi) fit now on nvidia.com/gpu.product=" + A100 in lines["gpu-nodes"]
    assert "gpu-0 8/8 GPUs free" in lines["gpu-nodes"]
    n = sum(len(p.verbs) for p in PERMISSIONS)
    assert f"all {n} permissions" in lines["rbac"]
    assert out.splitlines()[-1] == "6 ok, 0 warning(s), 0 failed"
    reviews = [r for r in cluster.api.requests if r[1] == SSAR]
    assert len(reviews) == n
    # namespaced permissions are reviewed in the namespace, cluster-scoped ones without
    attrs = [json.loads(r[3])["spec"]["resourceAttributes"] for r in reviews]
    logs = next(a for a in attrs if a["resource"] == "pods" and a.get("subresource") == "log")
    assert logs == {"verb": "get", "group": "", "resource": "pods", "subresource": "log", "namespace": NS}
    assert "namespace" not in next(a for a in attrs if a["resource"] == "nodes")


def test_json_output(cluster, capsys):
    cluster.groups.pop("kubeflow.org")
    assert main(["doctor", CONFIG, "-n", NS, "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1 and doc["namespace"] == NS and doc["backend"] == "pytorchjob"
    by = {c["name"]: c for c in doc["checks"]}
    assert by["backend"]["status"] == "fail" and "--backend rayjob" in by["backend"]["fix"]
    assert by["api-server"] == {"name": "api-server", "status": "ok", "finding": by["api-server"]["finding"],
                                "fix": None}


def test_unreachable_api_server_exits_3(tmp_path, monkeypatch, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(tmp_path / "kc", f"http://127.0.0.1:{port}")))
    rc, lines, out = doctor(capsys)
    assert rc == 3
    assert list(lines) == ["api-server"]
    assert lines["api-server"].startswith("✗ api-server") and "connection refused" in lines["api-server"]
    assert "fix: check the kubeconfig" in lines["api-server"]


def test_refused_credentials_exit_3(api, capsys):
    api.status("GET", "/version", 401, "Unauthorized", "Unauthorized")
    rc, lines, out = doctor(capsys)
    assert rc == 3 and "401 Unauthorized" in lines["api-server"]
    assert "s3cr3t" not in out


def test_server_error_mid_way_exits_3(cluster, capsys):
    cluster.api.status("GET", "/apis", 500, "etcd is down")
    rc, lines, out = doctor(capsys)
    assert rc == 3 and lines["cluster"].startswith("✗") and "etcd is down" in lines["cluster"]


def test_missing_namespace(cluster, capsys):
    del cluster.api.routes[("GET", f"/api/v1/namespaces/{NS}")]
    rc, lines, _ = doctor(capsys)
    assert rc == 1
    assert lines["namespace"].startswith(f"✗ namespace") and f"kubectl create namespace {NS}" in lines["namespace"]


# --- what the cluster serves ----------------------------------------------------------------------


def test_backend_not_served_names_the_operator_and_a_served_backend(cluster, capsys):
    cluster.groups.pop("kubeflow.org")
    rc, lines, _ = doctor(capsys)
    assert rc == 1
    line = lines["backend"]
    assert line.startswith("✗ backend")
    assert "needs pytorchjobs.kubeflow.org v1, which the cluster does not serve: the Kubeflow Training Operator " \
           "(v1) is not installed" in line
    assert "fix: install the Kubeflow Training Operator (v1): kubectl apply --server-side -k" in line
    assert "or use a backend this cluster serves: --backend rayjob" in line


def test_rayjob_needs_both_rayjobs_and_rayclusters(cluster, capsys):
    cluster.resources[("ray.io", "v1")] = ["rayjobs"]
    cluster.publish()
    rc, lines, _ = doctor(capsys, "--backend", "rayjob")
    assert rc == 1
    assert "needs rayclusters.ray.io v1" in lines["backend"] and "install KubeRay" in lines["backend"]
    assert "--backend pytorchjob" in lines["backend"]
    cluster.groups.pop("kubeflow.org")
    rc, lines, _ = doctor(capsys, "--backend", "rayjob")
    assert "or use a backend" not in lines["backend"]  # nothing else is served


def test_trainjob_is_listed_among_the_served_backends(cluster, capsys):
    cluster.groups["trainer.kubeflow.org"] = ["v1alpha1"]
    cluster.resources[("trainer.kubeflow.org", "v1alpha1")] = ["trainjobs", "trainingruntimes"]
    cluster.publish()
    rc, lines, _ = doctor(capsys)
    assert rc == 0 and "trainjobs.trainer.kubeflow.org v1alpha1" in lines["backend"]


def test_trainjob_backend_needs_trainer_and_jobset(cluster, capsys):
    rc, lines, _ = doctor(capsys, "--backend", "trainjob")
    assert rc == 1
    line = lines["backend"]
    assert "trainjob needs trainjobs.trainer.kubeflow.org v1alpha1, trainingruntimes.trainer.kubeflow.org v1alpha1, " \
           "jobsets.jobset.x-k8s.io v1alpha2, which the cluster does not serve" in line
    assert "install Kubeflow Trainer v2 (on JobSet)" in line and "manifests/overlays/manager?ref=v2.2.0" in line
    assert "or use a backend this cluster serves: --backend pytorchjob" in line
    cluster.groups.update({"trainer.kubeflow.org": ["v1alpha1"], "jobset.x-k8s.io": ["v1alpha2"]})
    cluster.resources[("trainer.kubeflow.org", "v1alpha1")] = ["trainjobs", "trainingruntimes"]
    cluster.resources[("jobset.x-k8s.io", "v1alpha2")] = ["jobsets"]
    cluster.publish()
    rc, lines, _ = doctor(capsys, "--backend", "trainjob")
    assert lines["backend"].startswith("✓ backend") and "trainjob: trainjobs.trainer.kubeflow.org v1alpha1" in \
        lines["backend"]


def test_queue_without_kueue_fails(cluster, capsys):
    rc, lines, _ = doctor(capsys, "--set", "scheduling.queue=gpu")
    assert rc == 1
    assert lines["kueue"].startswith("✗ kueue") and "scheduling.queue is gpu but Kueue is not installed" \
        in lines["kueue"]
    assert "install Kueue" in lines["kueue"] and "--set scheduling.queue=null" in lines["kueue"]


@pytest.mark.parametrize("versions", [["v1beta2", "v1beta1"], ["v1beta1"]])
def test_queue_with_kueue(cluster, capsys, versions):
    cluster.groups["kueue.x-k8s.io"] = versions
    for v in versions:
        cluster.resources[("kueue.x-k8s.io", v)] = ["localqueues", "clusterqueues", "workloads"]
    cluster.publish()
    ver = versions[0]
    lq = f"/apis/kueue.x-k8s.io/{ver}/namespaces/{NS}/localqueues"
    cluster.api.routes[("GET", lq)] = (200, {"items": [{"metadata": {"name": "team-a-queue"}}]})
    # the LocalQueue is missing: name the ones that exist
    rc, lines, _ = doctor(capsys, "--set", "scheduling.queue=gpu")
    assert rc == 1 and "LocalQueue gpu does not exist in namespace team-a" in lines["kueue"]
    assert "LocalQueues in team-a: team-a-queue" in lines["kueue"]
    assert "--set scheduling.queue=team-a-queue" in lines["kueue"]
    # it exists, its ClusterQueue does not
    cluster.api.routes[("GET", f"{lq}/gpu")] = (200, {"metadata": {"name": "gpu"}, "spec": {"clusterQueue": "cq"}})
    rc, lines, _ = doctor(capsys, "--set", "scheduling.queue=gpu")
    assert rc == 1 and "ClusterQueue cq" in lines["kueue"] and "does not exist" in lines["kueue"]
    # both exist
    cluster.api.routes[("GET", f"/apis/kueue.x-k8s.io/{ver}/clusterqueues/cq")] = (200, {"metadata": {"name": "cq"}})
    rc, lines, _ = doctor(capsys, "--set", "scheduling.queue=gpu")
    assert rc == 0, lines
    assert lines["kueue"] == (f"✓ kueue                  LocalQueue gpu in team-a → ClusterQueue cq "
                              f"(kueue.x-k8s.io {', '.join(versions)} served)")


# --- nodes ----------------------------------------------------------------------------------------


def test_no_matching_gpu_node_names_the_gpu_nodes_and_their_label(cluster, capsys):
    rc, lines, _ = doctor(capsys, "--set", "resources.gpu_type=H200")
    assert rc == 1
    line = lines["gpu-nodes"]
    assert line.startswith("✗ gpu-nodes") and "no node matches nvidia.com/gpu.product=NVIDIA-H200" in line
    assert f"gpu-0 (nvidia.com/gpu.product={A100}, 8 nvidia.com/gpu)" in line
    assert "fix: set resources.gpu_type to a GPU these nodes have: --set resources.gpu_type=A100-80GB" in line


def test_no_gpu_anywhere_says_what_to_install(cluster, capsys):
    cluster.nodes = [node("cpu-0", product=None, gpus=0)]
    rc, lines, _ = doctor(capsys)
    assert rc == 1 and "no node has nvidia.com/gpu allocatable" in lines["gpu-nodes"]
    assert "NVIDIA device plugin" in lines["gpu-nodes"]


def test_untolerated_taint_fails_and_the_configs_toleration_passes(cluster, capsys):
    taint = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}  # AKS's suggested GPU pool taint
    cluster.nodes = [node("gpu-0", taints=[taint])]
    rc, lines, _ = doctor(capsys)
    assert rc == 1
    assert "1 node(s) match" in lines["gpu-nodes"] and "gpu-0 (taint sku=gpu:NoSchedule)" in lines["gpu-nodes"]
    assert ("--set 'scheduling.tolerations=[{\"key\": \"sku\", \"operator\": \"Equal\", "
            "\"effect\": \"NoSchedule\", \"value\": \"gpu\"}]'") in lines["gpu-nodes"]
    tol = json.dumps([{"key": "sku", "operator": "Exists", "effect": "NoSchedule"}])
    rc, lines, _ = doctor(capsys, "--set", f"scheduling.tolerations={tol}")
    assert rc == 0 and lines["gpu-nodes"].startswith("✓")


def test_the_default_gpu_toleration_covers_the_nvidia_taint_unless_turned_off(cluster, capsys):
    cluster.nodes = [node("gpu-0", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])]
    rc, lines, _ = doctor(capsys)
    assert rc == 0 and lines["gpu-nodes"].startswith("✓")
    rc, lines, _ = doctor(capsys, "--set", "scheduling.gpu_toleration=false")
    assert rc == 1 and "gpu-0 (taint nvidia.com/gpu=present:NoSchedule)" in lines["gpu-nodes"]


def test_nodes_of_another_platform_suggest_its_scheme(cluster, capsys):
    gke = node("gke-0", product=None)
    gke["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = "nvidia-a100-80gb"
    cluster.nodes = [gke]
    rc, lines, _ = doctor(capsys)
    assert rc == 1
    assert ("no node matches nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB; nodes with nvidia.com/gpu: gke-0 "
            "(nvidia.com/gpu.product=<unset>, 8 nvidia.com/gpu)") in lines["gpu-nodes"]
    assert "--set resources.gpu_label_scheme=gke" in lines["gpu-nodes"]
    rc, lines, _ = doctor(capsys, "--set", "resources.gpu_label_scheme=gke", "--set", "resources.gpu_type=H200")
    assert rc == 1 and ("no node matches cloud.google.com/gke-accelerator=nvidia-h200-141gb; nodes with "
                        "nvidia.com/gpu: gke-0 (cloud.google.com/gke-accelerator=nvidia-a100-80gb, 8 nvidia.com/gpu)"
                        ) in lines["gpu-nodes"]
    assert "--set resources.gpu_type=A100-80GB" in lines["gpu-nodes"]
    rc, lines, _ = doctor(capsys, "--set", "resources.gpu_type=null")
    assert rc == 0 and lines["gpu-nodes"].startswith("✓"), lines["gpu-nodes"]


def test_node_selector_is_part_of_the_match(cluster, capsys):
    rc, lines, _ = doctor(capsys, "--set", 'scheduling.node_selector={"pool": "big"}')
    assert rc == 1 and "no node matches pool=big,nvidia.com/gpu.product=" in lines["gpu-nodes"]
    assert "scheduling.node_selector (pool)" in lines["gpu-nodes"]


def test_gpus_in_use_make_a_warning_not_a_failure(cluster, capsys):
    cluster.pods = [gpu_pod("gpu-0", 7), gpu_pod("gpu-1", 8), gpu_pod("gpu-1", 8, phase="Succeeded")]
    rc, lines, _ = doctor(capsys)
    assert rc == 0
    assert lines["gpu-nodes"].startswith("! gpu-nodes")
    assert "only 0 have room now (gpu-0 1/8 GPUs free, gpu-1 0/8 GPUs free)" in lines["gpu-nodes"]
    # a finished pod does not count; one free node is enough for one pod
    cluster.pods = [gpu_pod("gpu-0", 8), gpu_pod("gpu-1", 8, phase="Succeeded")]
    rc, lines, _ = doctor(capsys)
    assert rc == 0 and lines["gpu-nodes"].startswith("✓") and "gpu-1 8/8 GPUs free" in lines["gpu-nodes"]


def test_nodes_too_small_fail(cluster, capsys):
    cluster.nodes = [node("gpu-0", gpus=1), node("gpu-1", memory="64Gi")]
    rc, lines, _ = doctor(capsys)
    assert rc == 1 and "0 can ever hold one" in lines["gpu-nodes"]
    assert "gpu-0: 1 nvidia.com/gpu, 96 cpu, 1120Gi memory" in lines["gpu-nodes"]


def test_forbidden_reads_are_warnings(cluster, capsys):
    cluster.api.status("GET", "/api/v1/pods", 403, 'pods is forbidden: cannot list resource "pods"')
    rc, lines, _ = doctor(capsys)
    assert rc == 0 and lines["gpu-nodes"].startswith("! gpu-nodes") and "cannot tell what is free now" \
        in lines["gpu-nodes"]
    cluster.api.status("GET", "/api/v1/nodes", 403, "nodes is forbidden")
    rc, lines, _ = doctor(capsys)
    assert rc == 0 and "cannot list nodes (forbidden)" in lines["gpu-nodes"]


def test_cordoned_and_not_ready_nodes_do_not_count(cluster, capsys):
    cluster.nodes = [node("gpu-0", unschedulable=True), node("gpu-1")]
    cluster.nodes[1]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    rc, lines, _ = doctor(capsys)
    assert rc == 1 and "gpu-0 (cordoned), gpu-1 (NotReady)" in lines["gpu-nodes"]


# --- RBAC -----------------------------------------------------------------------------------------


def test_missing_permission_is_named_with_the_role_to_ask_for(cluster, capsys):
    cluster.denied = {("create", "kubeflow.org", "pytorchjobs"), ("get", "", "pods/log")}
    rc, lines, _ = doctor(capsys)
    assert rc == 1
    line = lines["rbac"]
    assert line.startswith("✗ rbac") and "missing: create kubeflow.org/pytorchjobs in team-a; get core/pods/log in team-a" \
        in line
    assert "fix: ask a cluster admin to apply the Role `launcher rbac -n team-a --serviceaccount team-a:bot` renders" \
        in line


def test_missing_permission_of_the_other_backend_or_cluster_reads_only_warns(cluster, capsys):
    cluster.denied = {("create", "ray.io", "rayjobs"), ("list", "", "nodes")}
    cluster.user = "alice"
    rc, lines, _ = doctor(capsys)
    assert rc == 0
    assert lines["rbac"].startswith("! rbac") and "create ray.io/rayjobs in team-a" in lines["rbac"]
    assert "list core/nodes cluster-wide" in lines["rbac"] and "--user alice" in lines["rbac"]
    # ... but they are needed for a RayJob config
    rc, lines, _ = doctor(capsys, "--backend", "rayjob")
    assert rc == 1 and lines["rbac"].startswith("✗ rbac")


# --- pure pieces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tol, taint, ok", [
    ({"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
    ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoExecute"}, True),
    ({"key": "a", "operator": "Equal", "value": "b"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
    ({"key": "a", "operator": "Equal", "value": "c"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, False),
    ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}, False),
    ({"key": "x", "operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, False),
    ({"operator": "Equal"}, {"key": "a", "effect": "NoSchedule"}, False),
])
def test_toleration_matching(tol, taint, ok):
    assert N.tolerates(tol, taint) is ok


def test_quantities():
    assert N.quantity("500m") == N.quantity("0.5") and N.quantity("128Gi") == 128 * 2**30
    assert N.quantity("1e3") == 1000 and N.quantity(8) == 8 and N.quantity(None) == 0 and N.quantity("x") == 0
    assert N.show_quantity("memory", N.quantity("1536Mi")) == "1.5Gi"
    assert N.show_quantity("cpu", N.quantity("500m")) == "0.5"


def test_pod_request_takes_init_containers_and_requests_first():
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}},
                                   {"resources": {"limits": {"cpu": "1"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "4"}}}]}}
    assert N.pod_request(pod, "cpu") == 4
    pod["spec"]["initContainers"] = []
    assert N.pod_request(pod, "cpu") == 2


def test_cpu_only_config_checks_cpu_and_memory_and_ignores_gpu_labels():
    spec = load_spec(CONFIG, ["workload=smoke", "resources.gpus_per_node=0", "resources.cpu='2'",
                              "resources.memory=4Gi"])
    assert spec.resources.cpu_only
    ok = N.assess_nodes(spec, [node("cpu-0", product=None, gpus=0, cpu="4", memory="8Gi")], [])
    assert ok.name == "nodes" and ok.status == C.OK and "1 pod(s) × (2 CPU, 4Gi) fit now" in ok.finding
    assert "cpu-0 4/4 CPUs free" in ok.finding
    busy = N.assess_nodes(spec, [node("cpu-0", product=None, gpus=0, cpu="4", memory="8Gi")],
                          [gpu_pod("cpu-0", 0, cpu="3")])
    assert busy.status == C.WARN
    small = N.assess_nodes(spec, [node("cpu-0", product=None, gpus=0, cpu="1", memory="8Gi")], [])
    assert small.status == C.FAIL and "0 can ever hold one" in small.finding


def test_multi_node_needs_distinct_nodes():
    spec = load_spec(CONFIG, ["resources.nodes=2"])
    one = N.assess_nodes(spec, [node("gpu-0", gpus=8)], [])
    assert one.status == C.FAIL and "1 can ever hold one" in one.finding
    two = N.assess_nodes(spec, [node("gpu-0"), node("gpu-1")], [gpu_pod("gpu-1", 7)])
    assert two.status == C.WARN and "only 1 have room now" in two.finding


def test_doctor_name_stays_within_the_name_limit():
    assert doctor_name("grpo-exp3") == "grpo-exp3-doctor"
    long = "a" * 30 + "-" + "b" * 7
    assert len(long) == 38 and len(doctor_name(long)) <= 38 and doctor_name(long).endswith("-doctor")
    assert doctor_name("a" * 30 + "-bcdefg") == "a" * 30 + "-doctor"


def test_smoke_cpu_config_finds_the_two_tainted_real_nodes():
    """configs/smoke-cpu.yaml selects the real nodes and tolerates their taint; the KWOK GPU nodes never match."""
    spec = load_spec(str(Path(CONFIG).parent / "smoke-cpu.yaml"), ["resources.nodes=2"])
    taint = [{"key": "grpo.launcher.io/real-node", "value": "true", "effect": "NoSchedule"}]
    real = [node(f"grpo-node-{i}", product=None, gpus=0, taints=taint, cpu="2", memory="8Gi") for i in (0, 1)]
    for n in real:
        n["metadata"]["labels"]["grpo.launcher.io/node-kind"] = "real"
    got = N.assess_nodes(spec, [node("kwok-a100-0"), *real], [])
    assert got.name == "nodes" and got.status == C.OK, got
    assert got.finding == ("2 pod(s) × (0.5 CPU, 2Gi) fit now on grpo.launcher.io/node-kind=real: "
                           "grpo-node-0 2/2 CPUs free, grpo-node-1 2/2 CPUs free")
    untolerated = spec.model_copy(update={"scheduling": spec.scheduling.model_copy(update={"tolerations": []})})
    blocked = N.assess_nodes(untolerated, real, [])
    assert blocked.status == C.FAIL and "taint grpo.launcher.io/real-node=true:NoSchedule" in blocked.finding
