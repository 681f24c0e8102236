"""Backend trainjob (Kubeflow Trainer v2.2 on JobSet v0.11): rendering, state, status, delete.

Rendering is checked against the TrainJob/TrainingRuntime CRDs of the trainer/v2 module (tests/crd_schema.py)
and against what Trainer's own code requires (its TrainingRuntime webhook, its torch plugin); the kube layer
against a fake (tests/kube_fakes.py). tests/e2e/test_trainjob_dryrun_e2e.py sends the same objects to the real
API server with the real Trainer and JobSet webhooks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crd_schema import schema_errors
from kube_fakes import FakeKube, pod
from launcher.spec import names as L
from launcher.spec.load import load_spec
from launcher.kube import POD as POD_RES
from launcher.kube import jobs as J
from launcher.render.manifests import render

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"
TWO = ["resources.nodes=2"]


def _objects(*sets: str) -> list[dict]:
    objects = render(load_spec(EXP3, list(sets), "trainjob"))
    for obj in objects:
        assert schema_errors(obj) == [], obj["kind"]
    return objects


def _rjob(runtime: dict) -> dict:
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return rjob


# --------------------------------------------------------------------------------------------------
# render


def test_render_order_and_names():
    objects = _objects(*TWO)
    assert [o["kind"] for o in objects] == ["ConfigMap", "TrainingRuntime", "TrainJob"]
    cm, runtime, job = objects
    name = job["metadata"]["name"]
    assert runtime["metadata"]["name"] == name and runtime["apiVersion"] == job["apiVersion"] == \
        "trainer.kubeflow.org/v1alpha1"
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": name}
    assert job["spec"]["trainer"] == {"numNodes": 2, "numProcPerNode": 1}
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {}}
    # both carry the run's selector labels, so delete and `helm uninstall` find them
    for obj in (runtime, job, cm):
        assert obj["metadata"]["labels"][L.INSTANCE_LABEL] == name
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == L.PART_OF


def test_runtime_is_what_trainers_webhook_and_torch_plugin_require():
    # pkg/webhooks/trainingruntime_webhook.go: an ancestor-labelled replicated Job has replicas 1 and a
    # container named for its ancestor (trainer → "node"); the torch plugin injects PET_* only into that one.
    rjob = _rjob(_objects(*TWO)[1])
    assert rjob["name"] == "node" and rjob["replicas"] == 1
    assert rjob["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    containers = rjob["template"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["node"]


def test_same_pod_as_the_pytorchjob_master():
    spec_tj = load_spec(EXP3, TWO, "trainjob")
    spec_pt = load_spec(EXP3, TWO, "pytorchjob")
    pod_tj = _rjob(render(spec_tj)[1])["template"]["spec"]["template"]
    master = render(spec_pt)[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    name_tj, name_pt = spec_tj.job_name, spec_pt.job_name

    def normal(t: dict, name: str, container: str) -> str:
        import json

        text = json.dumps(t, sort_keys=True).replace(name, "JOB").replace(name.rsplit("-", 1)[1], "HASH")
        text = text.replace(f'"name": "{container}"', '"name": "C"')
        return text.replace('"restartPolicy": "OnFailure"', '"restartPolicy": "Never"')

    # same security, volumes, /dev/shm, init container, env (secrets by reference), labels, affinity
    assert normal(pod_tj, name_tj, "node") == normal(master, name_pt, "pytorch")
    spec = pod_tj["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["initContainers"][0]["name"] == "prepare-data"
    assert any(v["name"] == "dshm" and v["emptyDir"]["medium"] == "Memory" for v in spec["volumes"])
    assert spec["containers"][0]["command"][:2] == ["/usr/bin/tini", "--"]
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["labelSelector"]["matchLabels"] == {L.INSTANCE_LABEL: name_tj, L.ROLE_LABEL: "gpu"}


def test_run_policy_maps_onto_jobset_and_trainjob_fields():
    runtime, job = _objects("run_policy.backoff_limit=3", "run_policy.active_deadline_seconds=3600",
                            "run_policy.ttl_seconds_after_finished=600")[1:]
    js = runtime["spec"]["template"]["spec"]
    assert js["failurePolicy"] == {"maxRestarts": 3}  # whole-gang restarts
    assert js["ttlSecondsAfterFinished"] == 600
    assert _rjob(runtime)["template"]["spec"]["backoffLimit"] == 0  # a failed pod fails its Job at once
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    gitops = render(load_spec(EXP3, ["run_policy.ttl_seconds_after_finished=600"], "trainjob"), gitops=True)
    assert "ttlSecondsAfterFinished" not in gitops[1]["spec"]["template"]["spec"]


def test_kueue_queue_suspends_the_trainjob_and_labels_it_not_the_runtime():
    runtime, job = _objects(*TWO, "scheduling.queue=team-a")[1:]
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][L.KUEUE_QUEUE_LABEL] == "team-a"
    assert L.KUEUE_QUEUE_LABEL not in runtime["metadata"]["labels"]
    assert "suspend" not in _objects(*TWO)[2]["spec"]


def test_crd_schema_is_strict_for_these_kinds():
    # the validator refuses what Trainer v2.2 removed or never had: a schema that let anything through would pass
    runtime, job = _objects()[1:]
    bad = {**job, "spec": {**job["spec"], "podTemplateOverrides": []}}  # gone in v2.2 (runtimePatches)
    assert any("podTemplateOverrides" in e for e in schema_errors(bad))
    bad_rt = {**runtime, "spec": {**runtime["spec"], "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": 1}}}}
    assert any("numProcPerNode" in e for e in schema_errors(bad_rt))  # the torch policy has no fields in v2.2


# --------------------------------------------------------------------------------------------------
# state


def _tj(conditions=(), jobs=None, suspend=False, queue=None) -> dict:
    labels = {"app.kubernetes.io/part-of": "grpo-launcher", "grpo.launcher.io/experiment": "exp",
              "app.kubernetes.io/instance": "exp-abcdef12"}
    if queue:
        labels[L.KUEUE_QUEUE_LABEL] = queue
    status = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]}
    if jobs is not None:
        status["jobsStatus"] = jobs
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "exp-abcdef12", "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"suspend": suspend}, "status": status}


def _counts(**kw) -> list[dict]:
    return [{"name": "node", **{k: kw.get(k, 0) for k in ("ready", "succeeded", "failed", "active", "suspended")}}]


def test_trainjob_states_from_conditions_and_job_counts():
    assert J.job_state("trainjob", _tj()).phase == "Pending"
    assert J.job_state("trainjob", _tj(jobs=_counts(active=1))).phase == "Pending"  # pods still starting
    assert J.job_state("trainjob", _tj(jobs=_counts(active=1, ready=1))).phase == "Running"
    assert J.job_state("trainjob", _tj(jobs=_counts(failed=1))).phase == "Restarting"
    ok = J.job_state("trainjob", _tj((("Complete", "True", "AllJobsCompleted", "jobset completed successfully"),)))
    assert (ok.phase, ok.finished, ok.succeeded) == ("Succeeded", True, True)
    bad = J.job_state("trainjob", _tj((("Failed", "True", "FailedJobs", "jobset failed: node-0 failed"),),
                                      jobs=_counts(failed=1)))
    assert (bad.phase, bad.finished, bad.succeeded) == ("Failed", True, False)
    assert bad.reason == "FailedJobs jobset failed: node-0 failed"
    late = J.job_state("trainjob", _tj((("Failed", "True", "DeadlineExceeded", "TrainJob exceeded its deadline"),)))
    assert late.phase == "Failed" and "DeadlineExceeded" in late.reason
    # a False condition is no verdict
    assert not J.job_state("trainjob", _tj((("Complete", "False", "", ""),))).finished


def test_suspended_trainjob_with_a_queue_is_queued():
    q = J.job_state("trainjob", _tj((("Suspended", "True", "Suspended", "TrainJob is suspended"),), suspend=True,
                                    queue="team-a"))
    assert q.phase == "Queued" and not q.finished
    assert J.job_state("trainjob", _tj(suspend=True)).phase == "Suspended"


def test_trainjob_pods_are_found_by_label_and_main_container_is_node():
    fk = FakeKube()
    job = "exp-abcdef12"
    p = pod(f"{job}-node-0-1-x7k2p", job, container="node")
    fk.put(p)
    fk.put(pod("other-node-0-0-abcde", "other", container="node"))
    ref = J.JobRef("trainjob", job, _tj())
    assert [q["metadata"]["name"] for q in J.job_pods(fk, ref)] == [f"{job}-node-0-1-x7k2p"]
    assert J.main_container(p) == "node"
    assert J.short_name(p, job) == "node-0-1-x7k2p"  # without JobSet's labels: the name past the job
    # what the Job controller and JobSet v0.11 add (seen on the local cluster's pods)
    p["metadata"]["labels"].update({J.JOBSET_NAME_LABEL: job, J.COMPLETION_INDEX: "1",
                                    "batch.kubernetes.io/job-name": f"{job}-node-0", "job-name": f"{job}-node-0"})
    assert not J.is_submitter(p)  # a Job's pod, but no RayJob submitter
    assert J.short_name(p, job) == "node-1"  # the node's rank, the same after a JobSet restart


def test_find_run_and_list_cover_trainjobs():
    fk = FakeKube()
    fk.put(_tj())
    ref = J.find_run(fk, "exp-abcdef12")
    assert ref.backend == "trainjob" and ref.resource.kind == "TrainJob"
    assert J.find_run(fk, "exp").name == "exp-abcdef12"  # by experiment
    assert [r.backend for r in J.list_runs(fk)] == ["trainjob"]


# --------------------------------------------------------------------------------------------------
# status and delete


def test_status_shows_trainjob_and_jobset_conditions_and_pod_reasons(monkeypatch, capsys):
    from launcher.cli.main import main
    from launcher.cli import cluster as _cluster

    fk = FakeKube()
    fk.events_for = lambda names: []
    job = "exp-abcdef12"
    fk.put(_tj((("Failed", "True", "FailedJobs", "jobset failed: job exp-abcdef12-node-0 failed"),),
               jobs=_counts(failed=1)))
    fk.put({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": job},
            "status": {"restarts": 2, "terminalState": "Failed", "conditions": [
                {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed"}]}})
    p = pod(f"{job}-node-0-0-x7k2p", job, phase="Failed", container="node", state="terminated")
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"exitCode": 3, "reason": "Error"}
    p.setdefault("spec", {})["nodeName"] = "gpu-node-3"
    fk.put(p)
    monkeypatch.setattr(_cluster, "connect", lambda args, namespace=None: fk)
    assert main(["status", job, "-o", "json"]) == 0
    assert [q["node"] for q in json.loads(capsys.readouterr().out)["pods"]] == ["gpu-node-3"]
    assert main(["status", job]) == 0
    out = capsys.readouterr().out
    assert f"TrainJob {job}" in out
    assert "state: Failed (FailedJobs jobset failed: job exp-abcdef12-node-0 failed)" in out
    assert "replicated Job node: active=0 ready=0 succeeded=0 failed=1 suspended=0" in out
    assert f"jobset {job}: restarts=2 terminalState=Failed" in out
    assert "condition Failed=True: FailedJobs jobset failed" in out
    assert "! container node exited 3 (Error)" in out
    assert f"{job}-node-0-0-x7k2p" in out and "node=gpu-node-3" in out  # the node the pod is bound to


def test_delete_removes_the_trainjob_its_runtime_and_configmap(monkeypatch, capsys):
    from launcher.cli.commands.delete import delete_run

    fk = FakeKube()
    job = "exp-abcdef12"
    fk.put(_tj())
    labels = {"app.kubernetes.io/name": "verl-grpo", "app.kubernetes.io/instance": job,
              "app.kubernetes.io/part-of": "grpo-launcher"}
    fk.put({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": job, "labels": labels}})
    fk.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{job}-spec", "labels": labels}})
    said = []
    delete_run(fk, J.find_run(fk, job), on_deleted=said.append)
    assert fk.objects == {}
    assert said[:2] == [f"deleted TrainJob {job} (propagation Foreground)", f"deleted TrainingRuntime {job}"]


def test_delete_waits_for_the_runtime_that_trainers_finalizer_holds(monkeypatch, capsys):
    """Trainer keeps `trainer.kubeflow.org/resource-in-use` on the TrainingRuntime until its TrainJob is gone: the
    runtime is still there (terminating) after the TrainJob and its pods, and `delete` returns only once it is gone."""
    import time

    from launcher.cli.main import main
    from launcher.cli import cluster as _cluster

    class Finalized(FakeKube):
        held = 3  # LISTs that still find the runtime after its delete was accepted

        def delete(self, res, name, **kw):
            if res.kind != "TrainingRuntime":
                return super().delete(res, name, **kw)
            self.deleted.append((res.kind, name))
            self.objects[(res.kind, name)]["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
            return True

        def list(self, res, **kw):
            key = (res.kind, job)
            if key in self.objects and "deletionTimestamp" in self.objects[key]["metadata"]:
                self.held -= 1
                if self.held < 0:
                    self.objects.pop(key)  # Trainer removed its finalizer
            return super().list(res, **kw)

    fk = Finalized()
    job = "exp-abcdef12"
    labels = {"app.kubernetes.io/name": "verl-grpo", "app.kubernetes.io/instance": job,
              "app.kubernetes.io/part-of": "grpo-launcher"}
    fk.put(_tj())
    fk.put({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": job, "labels": labels}})
    monkeypatch.setattr(_cluster, "connect", lambda args, namespace=None: fk)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    assert main(["delete", job]) == 0
    assert fk.objects == {} and fk.held == -1  # it polled until the runtime was really gone
    assert f"{job}: all pods gone, TrainingRuntime gone" in capsys.readouterr().out

    fk.put(_tj())
    fk.put({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": job, "labels": labels}})
    fk.held = 10**9  # a runtime that never goes: the wait times out and names it
    assert main(["delete", job, "--timeout", "0"]) == 1
    assert "TrainingRuntime still terminating" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_other_backends_render_no_runtime(backend):
    assert "TrainingRuntime" not in [o["kind"] for o in render(load_spec(EXP3, [], backend))]


# --------------------------------------------------------------------------------------------------
# following: the shared watches cover TrainJobs and every node's pod


def test_watch_follower_reads_every_node_pod_and_ends_on_complete(tmp_path):
    import threading

    import simlog
    from launcher.run.follow import LogFollower
    from launcher.run.jobstate import WatchState
    from launcher.kube import TRAINJOB
    from launcher.kube.informer import ClusterStateCache
    from launcher.run.dirs import RunDir
    from follow_support import raw, rows, wait_until

    job = "exp-abcdef12"
    fk = FakeKube()
    fk.put(_tj(jobs=_counts(active=1, ready=1)))
    head, worker = f"{job}-node-0-0-aaaaa", f"{job}-node-0-1-bbbbb"
    for i, name in enumerate((head, worker)):
        p = pod(name, job, container="node")
        p["metadata"]["labels"].update({J.JOBSET_NAME_LABEL: job, J.COMPLETION_INDEX: str(i),
                                        "batch.kubernetes.io/job-name": f"{job}-node-0"})
        fk.put(p)
    lines = [ln.rstrip("\n") for ln in simlog.generate(steps=3, seed=1)]
    fk.append(head, "node", 0, lines)
    fk.append(worker, "node", 0, ["[worker] raylet joined"])
    run_dir = RunDir(tmp_path / job)
    seen: list[tuple[str, str]] = []
    f = LogFollower(fk, J.JobRef("trainjob", job, fk.get(TRAINJOB, job)), run_dir, poll_interval=0.05,
                    read_timeout=2, state=None, on_line=lambda short, line: seen.append((short, line)))
    state = WatchState(fk, f.ref, cache=ClusterStateCache(fk))
    f._state_arg = state
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("result", f.run()), daemon=True)
    t.start()
    assert wait_until(lambda: run_dir.pod_log(worker).exists() and len(raw(run_dir, head)) == len(lines)
                      if run_dir.pod_log(head).exists() else False)
    for name in (head, worker):
        done = fk.get(POD_RES, name)
        done["status"] = {"phase": "Succeeded", "containerStatuses": [
            {"name": "node", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
        fk.put(done)
    fk.put(_tj((("Complete", "True", "AllJobsCompleted", "jobset completed successfully"),),
               jobs=_counts(succeeded=1)))
    t.join(15)
    state.close()
    assert out["result"].state.succeeded
    assert raw(run_dir, worker) == ["[worker] raylet joined"]
    assert [r["step"] for r in rows(run_dir)] == [1, 2, 3]
    assert {short for short, _ in seen} == {"node-0", "node-1"}
    # watches, not polls: the TrainJob kind and the pods each watched
    assert "watch TrainJob" in fk.requests and "watch Pod" in fk.requests



class _WebhookLagKube:
    """create() refuses a TrainJob the first `lag` times as Trainer's webhook does while its cache lacks the runtime."""

    def __init__(self, lag: int):
        self.lag, self.created, self.deleted = lag, [], []

    def create(self, obj, dry_run=False):
        from launcher.cli.commands.submit import RUNTIME_NOT_CREATED
        from launcher.kube import ApiError

        if obj["kind"] == "TrainJob" and self.lag > 0:
            self.lag -= 1
            raise ApiError(403, f'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
                                f'{RUNTIME_NOT_CREATED}', f"create TrainJob {obj['metadata']['name']}", "https://x")
        self.created.append(obj["kind"])
        return obj

    def delete(self, res, name):
        self.deleted.append(name)


def _trainjob_objects():
    return _objects()


def test_create_all_retries_a_trainjob_until_trainers_cache_has_the_runtime(monkeypatch):
    from launcher.cli.commands import submit

    monkeypatch.setattr("time.sleep", lambda s: None)
    kube = _WebhookLagKube(lag=3)
    job = submit.create_all(kube, _trainjob_objects())
    assert job["kind"] == "TrainJob" and kube.created[-2:] == ["TrainingRuntime", "TrainJob"] and not kube.deleted


def test_create_all_rolls_back_when_the_runtime_never_appears(monkeypatch):
    from launcher.cli.commands import submit
    from launcher.kube import ApiError

    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    monkeypatch.setattr("time.sleep", lambda s: None)
    kube = _WebhookLagKube(lag=10_000)
    with pytest.raises(ApiError, match="must be created before"):
        submit.create_all(kube, _trainjob_objects())
    assert kube.deleted and "TrainJob" not in kube.created  # what it created went again


def test_a_trainjob_whose_runtime_this_call_did_not_create_is_not_retried(monkeypatch):
    from launcher.cli.commands import submit
    from launcher.kube import ApiError

    monkeypatch.setattr("time.sleep", lambda s: pytest.fail("retried"))
    objs = [o for o in _trainjob_objects() if o["kind"] != "TrainingRuntime"]
    with pytest.raises(ApiError):
        submit.create_all(_WebhookLagKube(lag=1), objs)
