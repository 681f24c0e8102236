"""The chart and the GitOps manifests against the real local control plane (hack/cluster).

- `helm install` of charts/grpo-exp3 creates the launcher's job (same name: the chart computes the
  config hash itself), the real training-operator runs it on the KWOK A100 nodes to Succeeded, and
  `helm uninstall` removes every object the release created; with backend=rayjob, real KubeRay and
  the fake Ray dashboard take the RayJob to Complete/SUCCEEDED and uninstall removes its RayCluster;
  with backend=trainjob, the real Kubeflow Trainer v2.2 and JobSet controllers (their admission webhooks
  on) run the TrainJob through its own TrainingRuntime to Complete, and uninstall removes the TrainJob,
  the TrainingRuntime and the JobSet;
- `kubectl apply -k` of manifests/grpo-exp3 creates the same job, and applying it a second time
  reports every object `unchanged` (GitOps controllers re-apply on every sync); manifests/grpo-exp3-trainjob
  applies in one go (the TrainingRuntime before the TrainJob, which Trainer's webhook requires) and completes.

helm and kubectl are the cached ones from `make tools` (tests/helm_tools.py), always with the
cluster's explicit kubeconfig, never KUBECONFIG or ~/.kube/config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import kwok_support as ks

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for helm_tools
from helm_tools import CHART, ROOT, tool  # noqa: E402

from launcher.spec.load import load_spec  # noqa: E402
from launcher.render.manifests import render  # noqa: E402
from launcher.cli.commands.submit import RUNTIME_NOT_CREATED  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420, func_only=True)]  # func_only: never cut the shared cluster's start

FAST = {ks.POD_COMPLETE_DELAY: "3s"}  # KWOK completes the pods after 3 s instead of the cluster default


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(HELM_CACHE_HOME="/tmp/grpo-helm/cache", HELM_CONFIG_HOME="/tmp/grpo-helm/config",
               HELM_DATA_HOME="/tmp/grpo-helm/data")
    return env


def _helm(info: ks.ClusterInfo, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([tool("helm"), "--kubeconfig", str(info.kubeconfig), *args], capture_output=True,
                          text=True, env=_env(), timeout=180)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc



def _helm_trainjob(info: ks.ClusterInfo, co, namespace: str, runtime: str | None, verb: str, *args: str) -> None:
    """`helm install|upgrade` of a backend=trainjob release, as the chart README tells users to run it.

    Trainer's webhook checks the TrainJob's runtime in its informer cache, which can lag the runtime Helm created
    a moment before (seen under CI load). The refusal is then about time, not order: the runtime is already
    stored, and rerunning as `helm upgrade --install` finds it (a failed first revision is upgraded)."""
    proc = _helm(info, verb, *args, check=False)
    if proc.returncode != 0 and RUNTIME_NOT_CREATED in proc.stderr:
        stored = [o["metadata"]["name"] for o in co.list_namespaced_custom_object(*TRAINER, namespace,
                                                                                  "trainingruntimes")["items"]]
        assert (runtime in stored) if runtime else stored, stored  # the runtime was stored before the TrainJob
        proc = _helm(info, "upgrade", "--install", *args, check=False)
    assert proc.returncode == 0, f"helm {verb} {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"

def _kubectl(info: ks.ClusterInfo, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([tool("kubectl"), "--kubeconfig", str(info.kubeconfig), *args], capture_output=True,
                          text=True, env=_env(), timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _succeeded(co: client.CustomObjectsApi, ns: str, name: str):
    job = co.get_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", name)
    for cond in job.get("status", {}).get("conditions") or []:
        if cond["type"] == "Failed" and cond["status"] == "True":
            raise AssertionError(f"PyTorchJob {name} failed: {cond}")
        if cond["type"] == "Succeeded" and cond["status"] == "True":
            return job
    return None


def _gone(fn) -> bool:
    try:
        fn()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_helm_install_runs_the_job_and_uninstall_removes_it(kube_cluster, kube_api, namespace):
    sets = [f"scheduling.namespace={namespace}"]
    spec = load_spec(ROOT / "configs" / "grpo-exp3.yaml", sets)
    spec.scheduling.pod_annotations = FAST
    name = spec.job_name  # what `launcher render --set scheduling.namespace=... ` names it

    _helm(kube_cluster, "install", "grpo-exp3", str(CHART), "--namespace", namespace,
          "--set", f"scheduling.namespace={namespace}",
          "--set-json", f"scheduling.pod_annotations={json.dumps(FAST)}", "--wait=false")
    co, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    job = co.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert core.read_namespaced_config_map(f"{name}-spec", namespace).data["spec.yaml"] == \
        render(spec)[0]["data"]["spec.yaml"]

    ks.wait_for(lambda: _succeeded(co, namespace, name), timeout=240, what=f"PyTorchJob {name} Succeeded")
    status = _helm(kube_cluster, "status", "grpo-exp3", "--namespace", namespace).stdout
    assert "STATUS: deployed" in status and f"python -m launcher logs -f {name}" in status

    _helm(kube_cluster, "uninstall", "grpo-exp3", "--namespace", namespace, "--wait", "--timeout", "120s")
    ks.wait_for(lambda: _gone(lambda: co.get_namespaced_custom_object("kubeflow.org", "v1", namespace,
                                                                      "pytorchjobs", name)),
                timeout=120, what="PyTorchJob deleted")
    assert _gone(lambda: core.read_namespaced_config_map(f"{name}-spec", namespace))
    assert _helm(kube_cluster, "list", "--namespace", namespace, "-q").stdout.strip() == ""


def test_kubectl_apply_k_creates_the_job_and_reapplying_changes_nothing(kube_cluster, kube_api, namespace, tmp_path):
    # The committed directory, moved into the test's namespace by an overlay (names and content unchanged).
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(ROOT / "manifests" / "grpo-exp3", overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "namespace": namespace, "resources": [base],
    }))
    expected = {(o["kind"], o["metadata"]["name"]): o
                for o in render(load_spec(ROOT / "configs" / "grpo-exp3.yaml"), gitops=True)}

    first = _kubectl(kube_cluster, "apply", "-k", str(overlay)).stdout
    assert first.count(" created") == len(expected), first
    second = _kubectl(kube_cluster, "apply", "-k", str(overlay)).stdout
    lines = [ln for ln in second.splitlines() if ln.strip()]
    assert len(lines) == len(expected) and all(ln.endswith(" unchanged") for ln in lines), second

    co = client.CustomObjectsApi(kube_api)
    (kind, name), rendered = next((k, o) for k, o in expected.items() if k[0] == "PyTorchJob")
    live = co.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
    assert live["metadata"]["labels"] == rendered["metadata"]["labels"]
    live_pod = live["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    want_pod = rendered["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert live_pod["containers"][0]["command"] == want_pod["containers"][0]["command"]
    assert live_pod["nodeSelector"] == want_pod["nodeSelector"]
    ks.wait_for(lambda: _succeeded(co, namespace, name), timeout=240, what=f"PyTorchJob {name} Succeeded")
    # a finished job re-applied is still unchanged: the GitOps sync does not re-run it
    third = _kubectl(kube_cluster, "apply", "-k", str(overlay)).stdout
    assert all(ln.endswith(" unchanged") for ln in third.splitlines() if ln.strip()), third


def test_helm_install_rayjob_completes_and_uninstall_removes_it(kube_cluster, kube_api, namespace):
    """backend=rayjob: real KubeRay builds the Ray cluster, the fake dashboard completes the job."""
    sets = [f"scheduling.namespace={namespace}", "backend=rayjob"]
    spec = load_spec(ROOT / "configs" / "grpo-exp3.yaml", sets)
    name = spec.job_name
    _helm(kube_cluster, "install", "grpo-exp3-ray", str(CHART), "--namespace", namespace,
          *[a for s in sets for a in ("--set", s)])
    co = client.CustomObjectsApi(kube_api)

    def terminal():
        rj = co.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)
        return rj if rj.get("status", {}).get("jobDeploymentStatus") in ("Complete", "Failed") else None

    done = ks.wait_for(terminal, timeout=240, what=f"RayJob {name} terminal")
    assert done["status"]["jobDeploymentStatus"] == "Complete" and done["status"]["jobStatus"] == "SUCCEEDED", \
        done["status"]
    _helm(kube_cluster, "uninstall", "grpo-exp3-ray", "--namespace", namespace, "--wait", "--timeout", "120s")
    ks.wait_for(lambda: _gone(lambda: co.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)),
                timeout=120, what="RayJob deleted")
    ks.wait_for(lambda: not co.list_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters")["items"],
                timeout=120, what="RayCluster deleted with its RayJob")


# ---------------------------------------------------------------------------------------------------
# backend=trainjob: Kubeflow Trainer v2 (TrainingRuntime + TrainJob) on JobSet

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")


def _trainjob_complete(co: client.CustomObjectsApi, ns: str, name: str):
    job = co.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", name)
    for cond in job.get("status", {}).get("conditions") or []:
        if cond["type"] == "Failed" and cond["status"] == "True":
            raise AssertionError(f"TrainJob {name} failed: {cond}")
        if cond["type"] == "Complete" and cond["status"] == "True":
            return job
    return None


def _assert_trainjob_ran(co, core, ns: str, name: str, nodes: int) -> None:
    """The Trainer controller made a JobSet of the runtime's shape and its pods ran to the end (on KWOK nodes)."""
    jobset = co.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name)
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["node"]
    pods = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={name}").items
    assert len(pods) == nodes and all(p.status.phase == "Succeeded" for p in pods), \
        [(p.metadata.name, p.status.phase) for p in pods]
    assert all(p.spec.containers[0].name == "node" for p in pods)


def test_helm_install_trainjob_completes_and_uninstall_removes_it(kube_cluster, kube_api, namespace):
    """backend=trainjob: Helm creates the TrainingRuntime before the TrainJob (the webhook refuses the reverse)."""
    sets = [f"scheduling.namespace={namespace}", "backend=trainjob", "resources.nodes=2"]
    spec = load_spec(ROOT / "configs" / "grpo-exp3.yaml", sets)
    spec.scheduling.pod_annotations = FAST
    name = spec.job_name
    co, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    _helm_trainjob(kube_cluster, co, namespace, name, "install", "grpo-exp3-tj", str(CHART), "--namespace", namespace,
                   *[a for s in sets for a in ("--set", s)],
                   "--set-json", f"scheduling.pod_annotations={json.dumps(FAST)}", "--wait=false")
    runtime = co.get_namespaced_custom_object(*TRAINER, namespace, "trainingruntimes", name)
    job = co.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
    for obj in (runtime, job):
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert obj["metadata"]["annotations"]["meta.helm.sh/release-name"] == "grpo-exp3-tj"
    rendered = {o["kind"]: o for o in render(spec)}
    assert job["spec"]["runtimeRef"] == rendered["TrainJob"]["spec"]["runtimeRef"]
    assert core.read_namespaced_config_map(f"{name}-spec", namespace).data["spec.yaml"] == \
        rendered["ConfigMap"]["data"]["spec.yaml"]

    ks.wait_for(lambda: _trainjob_complete(co, namespace, name), timeout=240, what=f"TrainJob {name} Complete")
    _assert_trainjob_ran(co, core, namespace, name, nodes=2)
    status = _helm(kube_cluster, "status", "grpo-exp3-tj", "--namespace", namespace).stdout
    assert "STATUS: deployed" in status and f"trainjob/{name}" in status

    # a finished TrainJob (Complete) does not hold an upgrade back: changed values replace the run
    new = load_spec(ROOT / "configs" / "grpo-exp3.yaml", [*sets, "rollout.n=4"])
    new.scheduling.pod_annotations = FAST
    _helm_trainjob(kube_cluster, co, namespace, new.job_name, "upgrade", "grpo-exp3-tj", str(CHART),
                   "--namespace", namespace, *[a for s in sets for a in ("--set", s)], "--set", "rollout.n=4",
                   "--set-json", f"scheduling.pod_annotations={json.dumps(FAST)}", "--wait=false")
    for plural in ("trainjobs", "trainingruntimes"):
        ks.wait_for(lambda: [o["metadata"]["name"] for o in co.list_namespaced_custom_object(
            *TRAINER, namespace, plural)["items"]] == [new.job_name], timeout=120, what=f"only the new run's {plural}")
    name = new.job_name

    _helm(kube_cluster, "uninstall", "grpo-exp3-tj", "--namespace", namespace, "--wait", "--timeout", "120s")
    for plural in ("trainjobs", "trainingruntimes"):
        ks.wait_for(lambda: _gone(lambda: co.get_namespaced_custom_object(*TRAINER, namespace, plural, name)),
                    timeout=120, what=f"{plural} {name} deleted")
    ks.wait_for(lambda: _gone(lambda: co.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", name)),
                timeout=120, what="JobSet deleted with its TrainJob")
    assert _gone(lambda: core.read_namespaced_config_map(f"{name}-spec", namespace))
    assert _helm(kube_cluster, "list", "--namespace", namespace, "-q").stdout.strip() == ""


def test_kubectl_apply_k_trainjob_creates_runtime_then_job(kube_cluster, kube_api, namespace, tmp_path):
    """manifests/grpo-exp3-trainjob in one `kubectl apply -k`: every object created (none refused), then Complete."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(ROOT / "manifests" / "grpo-exp3-trainjob", overlay)
    # an overlay is the root kustomization, so it must keep the base's order itself (sortOptions is the root's)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "namespace": namespace, "resources": [base], "sortOptions": {"order": "fifo"},
        "patches": [{"target": {"kind": "TrainingRuntime"}, "patch": json.dumps([{
            "op": "add", "path": "/spec/template/spec/replicatedJobs/0/template/spec/template/metadata/annotations",
            "value": FAST}])}],
    }))
    expected = {(o["kind"], o["metadata"]["name"]): o
                for o in render(load_spec(ROOT / "configs" / "grpo-exp3.yaml", backend="trainjob"), gitops=True)}
    first = _kubectl(kube_cluster, "apply", "-k", str(overlay)).stdout
    assert first.count(" created") == len(expected) == 3, first
    name = next(n for k, n in expected if k == "TrainJob")
    co, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    ks.wait_for(lambda: _trainjob_complete(co, namespace, name), timeout=240, what=f"TrainJob {name} Complete")
    _assert_trainjob_ran(co, core, namespace, name, nodes=1)

    def versions():
        return [co.get_namespaced_custom_object(*TRAINER, namespace, plural, name)["metadata"]["resourceVersion"]
                for plural in ("trainingruntimes", "trainjobs")] + [
            core.read_namespaced_config_map(f"{name}-spec", namespace).metadata.resource_version]

    # A GitOps sync re-applies: nothing may change. kubectl may print the TrainingRuntime as "configured":
    # the CRD defaults replicatedJobs[].groupName, and a JSON merge patch (CRDs have no strategic merge)
    # resends the whole list; the server finds it equal, so the object (its resourceVersion) stays as it was.
    before = versions()
    again = _kubectl(kube_cluster, "apply", "-k", str(overlay)).stdout
    assert sorted(ln.split(" ")[0] for ln in again.splitlines() if ln.strip()) == sorted(
        [f"configmap/{name}-spec", f"trainingruntime.trainer.kubeflow.org/{name}",
         f"trainjob.trainer.kubeflow.org/{name}"]), again
    assert versions() == before, again
    assert _trainjob_complete(co, namespace, name)  # the finished run is not re-run


# ---------------------------------------------------------------------------------------------------
# The release as a Helm user drives it: `-n` without a namespace value, `helm test`, `helm upgrade`

LONG = {ks.POD_COMPLETE_DELAY: "600s"}  # the job stays Running for the whole test
# The test pod on this cluster: the real nodes (KWOK would fake its run), the CPU image they hold, and the
# API server where it listens (127.0.0.1 only, so the pod shares its node's network namespace).
LOCAL_TEST_POD = [
    "--set", "helm_test.image=ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu",
    "--set-json", 'helm_test.node_selector={"grpo.launcher.io/node-kind": "real"}',
    "--set-json", 'helm_test.tolerations=[{"key": "grpo.launcher.io/real-node", "operator": "Equal", '
                  '"value": "true", "effect": "NoSchedule"}]',
    "--set", "helm_test.host_network=true",
]


def _local_test_pod(info: ks.ClusterInfo) -> list[str]:
    server = yaml.safe_load(info.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return [*LOCAL_TEST_POD, "--set", f"helm_test.api_server={server.split('://', 1)[1]}"]


def _pytorchjobs(co: client.CustomObjectsApi, ns: str) -> list[str]:
    return sorted(j["metadata"]["name"] for j in co.list_namespaced_custom_object("kubeflow.org", "v1", ns,
                                                                                   "pytorchjobs")["items"])


def test_install_in_the_release_namespace_and_helm_test(kube_cluster, kube_api, namespace):
    """No namespace value: `helm install -n NS` puts the job in NS; `helm test` passes, then fails once it is gone."""
    spec = load_spec(ROOT / "configs" / "grpo-exp3.yaml", [f"scheduling.namespace={namespace}"])
    spec.scheduling.pod_annotations = LONG
    name = spec.job_name  # `launcher render --set scheduling.namespace=NS`: the namespace is part of the hash
    _helm(kube_cluster, "install", "exp", str(CHART), "--namespace", namespace,
          "--set-json", f"scheduling.pod_annotations={json.dumps(LONG)}", *_local_test_pod(kube_cluster))
    co = client.CustomObjectsApi(kube_api)
    assert _pytorchjobs(co, namespace) == [name]

    passed = _helm(kube_cluster, "test", "exp", "--namespace", namespace, "--logs", "--timeout", "180s")
    assert "Phase:          Succeeded" in passed.stdout and f"PyTorchJob {name}: 1 of 1 pods scheduled" in passed.stdout
    # the test pod really ran on a real node (a KWOK node would only pretend)
    pod = client.CoreV1Api(kube_api).read_namespaced_pod("exp-grpo-exp3-test", namespace)
    assert pod.spec.node_name.startswith("grpo-node-") and pod.status.phase == "Succeeded"

    co.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
    ks.wait_for(lambda: not _pytorchjobs(co, namespace), timeout=60, what="PyTorchJob deleted")
    failed = _helm(kube_cluster, "test", "exp", "--namespace", namespace, "--logs", "--timeout", "180s", check=False)
    assert failed.returncode != 0
    assert f"PyTorchJob {name} not found in namespace {namespace}" in failed.stdout + failed.stderr


def test_helm_test_fails_when_the_pods_are_not_scheduled(kube_cluster, namespace):
    """A node selector no node has: the job exists but its pod stays Pending; the test names the scheduler's reason."""
    _helm(kube_cluster, "install", "exp", str(CHART), "--namespace", namespace,
          "--set-json", 'scheduling.node_selector={"grpo.launcher.io/no-such-pool": "x"}',
          "--set", "helm_test.timeout_seconds=10", *_local_test_pod(kube_cluster))
    failed = _helm(kube_cluster, "test", "exp", "--namespace", namespace, "--logs", "--timeout", "180s", check=False)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0, out
    assert "not scheduled after 10s" in out and "is not scheduled (Unschedulable:" in out, out


def test_helm_upgrade_refuses_to_delete_a_running_job(kube_cluster, kube_api, namespace):
    """Changed values render a new job name; while the old job runs, the upgrade fails and leaves it alone."""
    base = ["--namespace", namespace, "--set-json", f"scheduling.pod_annotations={json.dumps(LONG)}"]
    _helm(kube_cluster, "install", "exp", str(CHART), *base)
    co = client.CustomObjectsApi(kube_api)
    [old] = _pytorchjobs(co, namespace)
    ks.wait_for(lambda: (co.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", old)
                         .get("status", {}).get("conditions") or [None])[-1], timeout=60, what="job has a condition")

    refused = _helm(kube_cluster, "upgrade", "exp", str(CHART), *base, "--set", "rollout.n=4", check=False)
    assert refused.returncode != 0
    assert f"helm upgrade refused: it would delete pytorchjob/{old}, which has not finished" in refused.stderr, \
        refused.stderr
    assert _pytorchjobs(co, namespace) == [old]  # still there, still the only one
    history = _helm(kube_cluster, "history", "exp", "--namespace", namespace, "-o", "json").stdout
    assert [r["status"] for r in json.loads(history)] == ["deployed"]  # nothing was recorded either

    # values that keep the job's name (helm_test.* is not part of the spec) upgrade as usual
    _helm(kube_cluster, "upgrade", "exp", str(CHART), *base, "--set", "helm_test.timeout_seconds=30")
    # the way on the message names: stop the old run, then upgrade
    co.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", old)
    ks.wait_for(lambda: not _pytorchjobs(co, namespace), timeout=60, what="PyTorchJob deleted")
    _helm(kube_cluster, "upgrade", "exp", str(CHART), *base, "--set", "rollout.n=4")
    new = load_spec(ROOT / "configs" / "grpo-exp3.yaml", [f"scheduling.namespace={namespace}", "rollout.n=4"])
    new.scheduling.pod_annotations = LONG
    assert _pytorchjobs(co, namespace) == [new.job_name] != [old]


def test_trainjob_release_helm_test_and_upgrade_guard(kube_cluster, kube_api, namespace):
    """backend=trainjob: `helm test` finds the TrainJob's pods scheduled; an upgrade that would delete it is refused."""
    base = ["--namespace", namespace, "--set", "backend=trainjob",
            "--set-json", f"scheduling.pod_annotations={json.dumps(LONG)}"]
    co = client.CustomObjectsApi(kube_api)
    _helm_trainjob(kube_cluster, co, namespace, None, "install", "exp", str(CHART), *base, *_local_test_pod(kube_cluster))
    [old] = [j["metadata"]["name"] for j in co.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")["items"]]

    passed = _helm(kube_cluster, "test", "exp", "--namespace", namespace, "--logs", "--timeout", "180s")
    assert "Phase:          Succeeded" in passed.stdout and f"TrainJob {old}: 1 of 1 pods scheduled" in passed.stdout

    refused = _helm(kube_cluster, "upgrade", "exp", str(CHART), *base, *_local_test_pod(kube_cluster),
                    "--set", "rollout.n=4", check=False)
    assert refused.returncode != 0
    assert f"helm upgrade refused: it would delete trainjob/{old}, which has not finished" in refused.stderr, \
        refused.stderr
    names = [j["metadata"]["name"] for j in co.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")["items"]]
    assert names == [old]
    runtimes = co.list_namespaced_custom_object(*TRAINER, namespace, "trainingruntimes")["items"]
    assert [r["metadata"]["name"] for r in runtimes] == [old]

    # the way on: stop the old run, then upgrade. Helm creates the new runtime before the new TrainJob (one
    # List) and deletes the old runtime, which Trainer releases (resource-in-use finalizer) once its TrainJob is gone.
    co.delete_namespaced_custom_object(*TRAINER, namespace, "trainjobs", old)
    ks.wait_for(lambda: not co.list_namespaced_custom_object(*TRAINER, namespace, "trainjobs")["items"], timeout=60,
                what="TrainJob deleted")
    _helm(kube_cluster, "upgrade", "exp", str(CHART), *base, *_local_test_pod(kube_cluster), "--set", "rollout.n=4")
    new = load_spec(ROOT / "configs" / "grpo-exp3.yaml",
                    [f"scheduling.namespace={namespace}", "backend=trainjob", "rollout.n=4"])
    new.scheduling.pod_annotations = LONG
    assert new.job_name != old
    for plural in ("trainjobs", "trainingruntimes"):
        ks.wait_for(lambda: [o["metadata"]["name"] for o in co.list_namespaced_custom_object(
            *TRAINER, namespace, plural)["items"]] == [new.job_name], timeout=60, what=f"only the new run's {plural}")
