"""Real behaviour of the local control plane (hack/cluster): API server validation, the real training-operator
and KubeRay operator, the real scheduler against fake A100 nodes, KWOK stages and KWOK log serving.

Every test runs against the cluster from the ``kube_cluster`` fixture (started on demand, never someone else's).
Every job is the launcher's own rendered grpo-exp3 (`launcher render` / `launcher.render.manifests.render`), with only the
KWOK stage annotations and, where a test needs it, a field broken on purpose; none is written by hand.
"""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import kwok_support as ks

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300, func_only=True)]  # func_only: never cut the shared cluster's start

A100_NODES = {"kwok-a100-0", "kwok-a100-1"}
VERL_LOG = [
    "2026-01-01 00:00:00,000\tINFO worker.py:2029 -- Started a local Ray instance.",
    "(TaskRunnerV1 pid=123) step:1 - actor/pg_loss:-0.013 - critic/score/mean:0.625 - timing_s/step:19.3",
    "(TaskRunnerV1 pid=123) step:2 - actor/pg_loss:-0.011 - critic/score/mean:0.6875 - timing_s/step:18.9",
]


def exp3_objects(backend: str, *sets: str, annotations: dict | None = None) -> list[dict]:
    """The launcher's own manifests for grpo-exp3 (`launcher.render.manifests.render`, what `submit` sends), in apply
    order; `annotations` become `scheduling.pod_annotations` (the KWOK stage annotations these tests need)."""
    from launcher.spec.load import load_spec
    from launcher.render.manifests import render

    overrides = list(sets)
    if annotations:
        overrides.append("scheduling.pod_annotations=" + json.dumps(annotations))
    return render(load_spec(ks.REPO_ROOT / "configs" / "grpo-exp3.yaml", overrides, backend=backend))


def exp3_pytorchjob(*sets: str, delay: str = "15s", exit_code: int | None = None) -> list[dict]:
    """grpo-exp3's rendered ConfigMap + PyTorchJob; KWOK completes the pod after `delay`, or fails it with
    `exit_code`."""
    annotations = {ks.POD_COMPLETE_DELAY: delay}
    if exit_code is not None:
        annotations[ks.POD_FAIL_EXIT_CODE] = str(exit_code)
    return exp3_objects("pytorchjob", *sets, annotations=annotations)


def in_namespace(obj: dict, ns: str) -> dict:
    """A copy of a rendered object placed in the test's namespace."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = ns
    return obj


PLURALS = {("kubeflow.org/v1", "PyTorchJob"): "pytorchjobs", ("ray.io/v1", "RayJob"): "rayjobs"}


def render_exp3(backend: str, *sets: str) -> list[dict]:
    """`launcher render configs/grpo-exp3.yaml` (the real renderer) -> objects in apply order."""
    cmd = [sys.executable, "-m", "launcher", "render", str(ks.REPO_ROOT / "configs" / "grpo-exp3.yaml"),
           "--backend", backend]
    for kv in sets:
        cmd += ["--set", kv]
    out = subprocess.run(cmd, cwd=ks.REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def create_objects(api, ns: str, objs: list[dict], **kw) -> dict:
    """Create rendered objects in namespace ns (server-side validation Strict); returns the job object."""
    core, co = client.CoreV1Api(api), _co(api)
    job = None
    for obj in objs:
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = ns
        if obj["kind"] == "ConfigMap":
            core.create_namespaced_config_map(ns, obj, field_validation="Strict", **kw)
            continue
        plural = PLURALS[(obj["apiVersion"], obj["kind"])]
        group, version = obj["apiVersion"].split("/")
        job = co.create_namespaced_custom_object(group, version, ns, plural, obj, field_validation="Strict", **kw)
    assert job is not None, [o["kind"] for o in objs]
    return job


def _co(api) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _pod(core: client.CoreV1Api, ns: str, name: str):
    try:
        return core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _cond(obj_conditions, ctype):
    for c in obj_conditions or []:
        t = c["type"] if isinstance(c, dict) else c.type
        if t == ctype:
            return c
    return None


def _job_condition_true(co, ns, name, ctype):
    job = co.get_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", name)
    c = _cond(job.get("status", {}).get("conditions"), ctype)
    return job if c and c["status"] == "True" else None


# ---------------------------------------------------------------------------------------------------------------

def test_pytorchjob_runs_on_a100_serves_log_and_succeeds(kube_cluster, kube_api, namespace):
    """The rendered grpo-exp3 PyTorchJob, end to end through the real operator, scheduler and pod-logs API."""
    core, co = client.CoreV1Api(kube_api), _co(kube_api)
    objs = render_exp3("pytorchjob", "scheduling.pod_annotations=" + json.dumps({ks.POD_COMPLETE_DELAY: "15s"}))
    assert [o["kind"] for o in objs][-1] == "PyTorchJob"
    name = objs[-1]["metadata"]["name"]
    assert name.startswith("grpo-exp3-")
    pod_name = f"{name}-master-0"
    served = ks.serve_logs(kube_cluster, namespace, pod_name, "\n".join(VERL_LOG),
                           previous="previous attempt: CUDA error: out of memory")

    dry = create_objects(kube_api, namespace, objs, dry_run="All")
    assert dry["metadata"]["name"] == name and "uid" in dry["metadata"]
    with pytest.raises(ApiException) as nf:  # dry-run persisted nothing
        co.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
    assert nf.value.status == 404

    create_objects(kube_api, namespace, objs)

    # the real training-operator creates the master pod, owned by the PyTorchJob
    pod = ks.wait_for(lambda: _pod(core, namespace, pod_name), timeout=60, what="master pod")
    assert [o.kind for o in pod.metadata.owner_references] == ["PyTorchJob"]
    assert pod.spec.containers[0].name == "pytorch"

    # the real scheduler binds it to an A100 node, KWOK runs it
    pod = ks.wait_for(lambda: (p := _pod(core, namespace, pod_name)) and p.status.phase == "Running" and p,
                      timeout=60, what="master pod Running")
    assert pod.spec.node_name in A100_NODES
    sched = _cond(pod.status.conditions, "PodScheduled")
    assert sched is not None and sched.status == "True"
    running = ks.wait_for(lambda: _job_condition_true(co, namespace, name, "Running"), timeout=30,
                          what="PyTorchJob Running")
    assert running["status"]["replicaStatuses"]["Master"].get("active") == 1

    # the pod-logs API returns the chosen log (through apiserver -> kwok's kubelet endpoint)
    text = core.read_namespaced_pod_log(pod_name, namespace, container="pytorch")
    assert text.splitlines() == VERL_LOG
    prev = core.read_namespaced_pod_log(pod_name, namespace, container="pytorch", previous=True)
    assert prev.splitlines() == ["previous attempt: CUDA error: out of memory"]
    tail = core.read_namespaced_pod_log(pod_name, namespace, container="pytorch", tail_lines=1)
    assert tail.splitlines() == VERL_LOG[-1:]
    ks.append_log(served, "(TaskRunnerV1 pid=123) step:3 - actor/pg_loss:-0.010")
    text = core.read_namespaced_pod_log(pod_name, namespace, container="pytorch")
    assert text.splitlines()[-1] == "(TaskRunnerV1 pid=123) step:3 - actor/pg_loss:-0.010"
    tqdm = "Training Progress:   5%|5         | 1/20 [00:19<06:01]\rTraining Progress:  10%|#         | 2/20"
    ks.append_log(served, tqdm)  # "\r" stays inside one CRI entry and comes back as-is
    text = core.read_namespaced_pod_log(pod_name, namespace, container="pytorch")
    assert text.split("\n")[-2] == tqdm
    stamped = core.read_namespaced_pod_log(pod_name, namespace, container="pytorch", timestamps=True)
    assert all(ks.CRI_LINE.match(line.replace(" ", " stdout F ", 1)) for line in stamped.split("\n")[:-1])

    # KWOK completes the pod after the annotated delay; the operator marks the job Succeeded
    job = ks.wait_for(lambda: _job_condition_true(co, namespace, name, "Succeeded"), timeout=90,
                      what="PyTorchJob Succeeded")
    assert job["status"]["replicaStatuses"]["Master"].get("succeeded") == 1
    pod = core.read_namespaced_pod(pod_name, namespace)
    assert pod.status.phase == "Succeeded"
    term = pod.status.container_statuses[0].state.terminated
    assert term is not None and term.exit_code == 0
    started = _cond(running["status"]["conditions"], "Running")["lastTransitionTime"]
    assert job["status"]["completionTime"] > started


def test_pytorchjob_fails_with_annotated_exit_code(kube_cluster, kube_api, namespace):
    """KWOK's pod-fail stage ends the pod Failed with the annotated exit code; the real operator fails the job.

    Real training-operator v1.9.0 behaviour seen here: with runPolicy.backoffLimit set, the failure path deletes
    the job's pods *before* marking the job Failed, regardless of cleanPodPolicy=None (and may race-recreate the
    master once), so the failed pod is observed through a watch rather than read afterwards.
    """
    from kubernetes import watch

    core, co = client.CoreV1Api(kube_api), _co(kube_api)
    objs = exp3_pytorchjob(delay="3s", exit_code=3)
    name = objs[-1]["metadata"]["name"]
    assert objs[-1]["spec"]["runPolicy"]["backoffLimit"] == 0  # grpo-exp3's default: a failed pod fails the job
    exit_codes: list[int] = []
    w = watch.Watch()

    def watch_pods():
        try:
            for ev in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=120):
                p = ev["object"]
                for cs in p.status.container_statuses or []:
                    if cs.state and cs.state.terminated and p.status.phase == "Failed":
                        exit_codes.append(cs.state.terminated.exit_code)
        except Exception:  # the stream is cut when the test stops the watch
            pass

    t = threading.Thread(target=watch_pods, daemon=True)
    t.start()
    time.sleep(0.5)
    create_objects(kube_api, namespace, objs)
    job = ks.wait_for(lambda: _job_condition_true(co, namespace, name, "Failed"), timeout=90,
                      what="PyTorchJob Failed")
    failed = _cond(job["status"]["conditions"], "Failed")
    assert failed["reason"] == "PyTorchJobFailed"
    assert "backoff limit" in failed["message"]
    assert _cond(job["status"]["conditions"], "Succeeded") is None
    ks.wait_for(lambda: exit_codes, timeout=30, what="a Failed pod in the watch")
    w.stop()
    assert set(exit_codes) == {3}


def test_sixteen_gpus_stay_pending_insufficient(kube_cluster, kube_api, namespace):
    core = client.CoreV1Api(kube_api)
    # grpo-exp3 on 16 GPUs in one pod (micro-batches of 1 keep the batch rules satisfied): no node has 16
    objs = exp3_pytorchjob("resources.gpus_per_node=16", "actor.ppo_micro_batch_size_per_gpu=1",
                           "rollout.log_prob_micro_batch_size_per_gpu=1")
    container = objs[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 16
    create_objects(kube_api, namespace, objs)
    pod_name = f"{objs[-1]['metadata']['name']}-master-0"

    def unschedulable():
        p = _pod(core, namespace, pod_name)
        c = p and _cond(p.status.conditions, "PodScheduled")
        return (p, c) if c is not None and c.status == "False" else None

    pod, cond = ks.wait_for(unschedulable, timeout=60, what="PodScheduled=False")
    assert cond.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in cond.message, cond.message
    # the 3 KWOK nodes, plus the real nodes when they run (tainted, no GPU): none fits
    assert re.search(r"0/\d+ nodes are available", cond.message) and "Insufficient nvidia.com/gpu" in cond.message, \
        cond.message
    time.sleep(3)
    pod = core.read_namespaced_pod(pod_name, namespace)
    assert pod.status.phase == "Pending" and not pod.spec.node_name


def test_rayjob_cluster_pods_bound_and_job_completes(kube_cluster, kube_api, namespace):
    """The rendered grpo-exp3 RayJob: real KubeRay creates the RayCluster and the submitter Job; with the fake
    dashboard the RayJob completes, and shutdownAfterJobFinishes deletes the RayCluster."""
    core, co = client.CoreV1Api(kube_api), _co(kube_api)
    batch = client.BatchV1Api(kube_api)
    objs = render_exp3("rayjob")
    rj_obj = objs[-1]
    assert rj_obj["kind"] == "RayJob" and rj_obj["spec"]["submissionMode"] == "K8sJobMode"
    name = rj_obj["metadata"]["name"]
    ks.serve_cluster_logs(kube_cluster, f"{namespace}-all", "\n".join(VERL_LOG), namespaces=[namespace])
    create_objects(kube_api, namespace, objs)

    def get_rj():
        return co.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)

    rj = ks.wait_for(lambda: (o := get_rj()).get("status", {}).get("rayClusterName") and o, timeout=60,
                     what="RayCluster name")
    rc_name = rj["status"]["rayClusterName"]
    # KubeRay records the name in the RayJob's status one reconcile before it creates the RayCluster
    rc = ks.wait_for(lambda: co.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", rc_name),
                     timeout=60, what="RayCluster created")
    assert rc["metadata"]["ownerReferences"][0]["kind"] == "RayJob"

    def ray_pods_running():
        pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={rc_name}").items
        ok = len(pods) == 2 and all(p.status.phase == "Running" and p.spec.node_name for p in pods)
        return pods if ok else None

    pods = ks.wait_for(ray_pods_running, timeout=90, what="ray head+worker Running")
    by_type = {p.metadata.labels["ray.io/node-type"]: p for p in pods}
    assert set(by_type) == {"head", "worker"}
    assert by_type["worker"].spec.node_name in A100_NODES  # 2 GPUs, nodeSelector A100
    ks.wait_for(lambda: co.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", rc_name)
                .get("status", {}).get("state") == "ready", timeout=60, what="RayCluster ready")

    # K8sJobMode: the operator creates a batch/v1 submitter Job; its pod's log is served by the ClusterLogs
    ks.wait_for(lambda: batch.read_namespaced_job(name, namespace), timeout=60, what="submitter Job")
    sub = ks.wait_for(lambda: core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items,
                      timeout=60, what="submitter pod")[0]
    ks.wait_for(lambda: core.read_namespaced_pod(sub.metadata.name, namespace).status.phase
                in ("Running", "Succeeded"), timeout=60, what="submitter pod running")
    assert core.read_namespaced_pod_log(sub.metadata.name, namespace).splitlines() == VERL_LOG
    rj = get_rj()
    assert rj["status"]["jobDeploymentStatus"] in ("Running", "Complete"), rj["status"]
    # head/worker pods are not batch pods: KWOK keeps them running while the submitter finishes
    assert ray_pods_running() is not None

    done = ks.wait_for(lambda: (o := get_rj()).get("status", {}).get("jobDeploymentStatus")
                       in ("Complete", "Failed") and o, timeout=120, what="RayJob terminal")
    assert done["status"]["jobDeploymentStatus"] == "Complete", done["status"]
    assert done["status"]["jobStatus"] == "SUCCEEDED"
    assert batch.read_namespaced_job(name, namespace).status.succeeded == 1
    # shutdownAfterJobFinishes: true -> the operator deletes the RayCluster, KWOK's pod-delete stage the pods
    ks.wait_for(lambda: not co.list_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters")["items"],
                timeout=60, what="RayCluster deleted")
    ks.wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={rc_name}").items,
                timeout=60, what="ray pods deleted")


def test_invalid_manifests_rejected_by_apiserver(kube_cluster, kube_api, namespace):
    """The launcher's rendered PyTorchJob and RayJob, each broken in one field, against the real CRD schemas."""
    co = _co(kube_api)
    job = in_namespace(exp3_pytorchjob()[-1], namespace)
    ok = co.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", copy.deepcopy(job),
                                            dry_run="All", field_validation="Strict")
    assert ok["metadata"]["name"] == job["metadata"]["name"]  # unbroken, the rendered job is accepted as is
    bad_type = copy.deepcopy(job)
    bad_type["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", bad_type, dry_run="All")
    assert e.value.status == 422
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid"
    assert 'spec.pytorchReplicaSpecs.Master.replicas: Invalid value: "string"' in status["message"], status
    assert "must be of type integer" in status["message"]
    assert {"reason": "FieldValueTypeInvalid", "field": "spec.pytorchReplicaSpecs.Master.replicas"}.items() \
        <= status["details"]["causes"][0].items()

    unknown = copy.deepcopy(job)
    unknown["spec"]["pytorchReplicaSpecs"]["Master"]["gpusPerNode"] = 2
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", unknown,
                                           dry_run="All", field_validation="Strict")
    assert e.value.status == 400
    status = json.loads(e.value.body)
    assert status["reason"] == "BadRequest"
    assert 'strict decoding error: unknown field "spec.pytorchReplicaSpecs.Master.gpusPerNode"' \
        in status["message"], status

    # without Strict the same object is accepted (field dropped, warning only): the rejection above is Strict's
    ok = co.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs",
                                            copy.deepcopy(unknown), dry_run="All", field_validation="Ignore")
    assert "gpusPerNode" not in ok["spec"]["pytorchReplicaSpecs"]["Master"]

    rayjob = in_namespace(exp3_objects("rayjob")[-1], namespace)
    assert rayjob["kind"] == "RayJob"
    co.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", copy.deepcopy(rayjob), dry_run="All",
                                       field_validation="Strict")
    bad_ray = copy.deepcopy(rayjob)
    bad_ray["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", bad_ray, dry_run="All")
    assert e.value.status == 422
    assert ('spec.rayClusterSpec.workerGroupSpecs[0].replicas: Invalid value: "string"'
            in json.loads(e.value.body)["message"]), e.value.body


def test_follow_stream_tails_and_does_not_end_when_pod_completes(kube_cluster, kube_api, namespace):
    """Documents KWOK's follow=true: it tails appended lines and stays open after the pod has Succeeded."""
    core = client.CoreV1Api(kube_api)
    objs = exp3_pytorchjob(delay="8s")
    pod_name = f"{objs[-1]['metadata']['name']}-master-0"
    served = ks.serve_logs(kube_cluster, namespace, pod_name, VERL_LOG[0])
    create_objects(kube_api, namespace, objs)
    ks.wait_for(lambda: (p := _pod(core, namespace, pod_name)) and p.status.phase == "Running", timeout=60,
                what="pod Running")

    resp = core.read_namespaced_pod_log(pod_name, namespace, follow=True, _preload_content=False)
    got: list[str] = []
    ended = threading.Event()

    def reader():
        buf = b""
        try:
            for chunk in resp.stream(64):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    got.append(line.decode())
        except Exception:
            pass
        finally:
            ended.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    ks.wait_for(lambda: got == VERL_LOG[:1], timeout=15, what="first line")
    live = ks.LiveLog(served).start(VERL_LOG[1:], interval=0.5)
    ks.wait_for(lambda: got == VERL_LOG, timeout=15, what="appended lines through the open stream")
    live.stop()

    ks.wait_for(lambda: core.read_namespaced_pod(pod_name, namespace).status.phase == "Succeeded", timeout=60,
                what="pod Succeeded")
    assert not ended.wait(5), "follow stream ended by itself"
    ks.append_log(served, "after completion")
    ks.wait_for(lambda: got[-1:] == ["after completion"], timeout=15, what="line appended after completion")
    resp.shutdown()  # unblocks the reader (urllib3 >= 2.3); the client ends the stream, not the server
    resp.release_conn()
    assert ended.wait(10)


def test_default_namespace_serves_verl_log(kube_cluster, kube_api):
    """up.sh serves a realistic verl console log to every pod in namespace `default` (embedded demo)."""
    core = client.CoreV1Api(kube_api)
    name = f"grpo-default-log-probe-{int(time.time())}"
    core.create_namespaced_pod("default", client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(node_selector={"kubernetes.io/hostname": "kwok-cpu-0"},
                              containers=[client.V1Container(name="main", image="busybox")])))
    try:
        ks.wait_for(lambda: core.read_namespaced_pod(name, "default").status.phase == "Running", timeout=60,
                    what="probe pod Running")
        text = re.sub(r"\x1b\[[0-9;]*m", "", core.read_namespaced_pod_log(name, "default"))  # Ray colours the prefix
        steps = [line for line in text.splitlines() if " step:" in line and "training/global_step:" in line]
        assert len(steps) >= 5, text[:2000]
        assert steps[0].startswith("(TaskRunnerV1 pid=")
        for key in ("critic/score/mean:", "actor/pg_loss:", "timing_s/step:", "perf/throughput:"):
            assert key in steps[0]
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_fixture_refuses_clusters_it_did_not_start(kube_cluster, tmp_path, monkeypatch):
    import json
    import os
    import shutil

    # our cluster is identified even when KUBECONFIG points elsewhere
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "someone-elses-kubeconfig"))
    info = ks.identify_cluster()
    assert info is not None and info.cluster_id == kube_cluster.cluster_id
    assert os.environ["GRPO_TOOLS_BIN"] == str(kube_cluster.tools_bin)
    assert (kube_cluster.tools_bin / "kubectl").exists() and (kube_cluster.tools_bin / "helm").exists()

    # same API server, but a marker whose id does not match the ConfigMap: refused
    fake = tmp_path / "cluster"
    fake.mkdir()
    shutil.copy(kube_cluster.kubeconfig, fake / "kubeconfig")
    marker = json.loads((ks.cluster_dir() / "grpo-cluster.json").read_text())
    marker.update(cluster_id="not-" + marker["cluster_id"], kubeconfig=str(fake / "kubeconfig"))
    (fake / "grpo-cluster.json").write_text(json.dumps(marker))
    monkeypatch.setenv("GRPO_CLUSTER_DIR", str(fake))
    assert ks.identify_cluster() is None
    # no marker at all: refused
    (fake / "grpo-cluster.json").unlink()
    assert ks.identify_cluster() is None


def test_report_of_a_run_on_kwok_nodes_says_it_is_simulated(kube_cluster, namespace, tmp_path):
    """`launcher submit --follow` on the fake A100 nodes records the KWOK node in runs/<job>/pods.json, and
    `launcher report` leads with the simulated-trainer note (the log is a generated verl log)."""
    from launcher.spec.load import load_spec
    from launcher_helpers import CONFIG, cri, run_launcher, verl_lines

    steps = 4
    sets = [f"trainer.total_training_steps={steps}", f"scheduling.namespace={namespace}",
            "scheduling.pod_annotations=" + json.dumps({ks.POD_COMPLETE_DELAY: "10s"})]
    job = load_spec(CONFIG, sets).job_name
    ks.serve_logs(kube_cluster, namespace, f"{job}-master-0", cri(verl_lines(steps)))
    runs = tmp_path / "runs"
    rc, _, err = run_launcher(["submit", CONFIG, "--follow", *[a for s in sets for a in ("--set", s)]],
                              kube_cluster, runs, timeout=180)
    assert rc == 0, err[-2000:]
    pods = json.loads((runs / job / "pods.json").read_text())["pods"]
    assert list(pods) == [f"{job}-master-0"]
    assert pods[f"{job}-master-0"]["node"] in A100_NODES and pods[f"{job}-master-0"]["simulated"] is True
    rc, _, err = run_launcher(["report", str(runs / job), "--no-plots"], kube_cluster, runs)
    assert rc == 0, err
    md = (runs / job / "report.md").read_text()
    assert "> **Simulated trainer (KWOK fake nodes; generated verl log).**" in md.split("## Config")[0]
    assert json.loads((runs / job / "report.json").read_text())["execution"]["simulated"] is True
