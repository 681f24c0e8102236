"""What a Kueue Workload's conditions mean to a user (launcher.kube.kueue), and the Queued job state.

Workload shapes as Kueue v0.17 writes them (the messages are Kueue's); the real controller's behaviour is in
tests/e2e/test_kueue_e2e.py."""
from __future__ import annotations

from launcher.kube import jobs as J
from launcher.kube import kueue as Q


def wl(*conds, admission=None):
    status = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds]}
    if admission:
        status["admission"] = admission
    return {"metadata": {"name": "pytorchjob-x-1"}, "status": status}


ADMISSION = {"clusterQueue": "grpo-a100", "podSetAssignments": [{"name": "master", "flavors": {"nvidia.com/gpu": "a100",
                                                                                             "cpu": "a100"}}]}
QUOTA_MSG = ("couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in flavor a100, "
             "1 more needed")


def test_waiting_for_quota_names_the_resource():
    a = Q.admission(wl(("QuotaReserved", "False", "Pending", QUOTA_MSG)))
    assert (a.state, a.reason, a.message) == ("Queued", "Pending", QUOTA_MSG)
    assert "nvidia.com/gpu" in a.line() and a.line().startswith("Queued")


def test_admitted_names_the_cluster_queue_and_flavors():
    a = Q.admission(wl(("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", "ok"),
                       admission=ADMISSION))
    assert a.state == "Admitted" and a.cluster_queue == "grpo-a100" and a.flavors == "cpu=a100, nvidia.com/gpu=a100"
    assert "ClusterQueue grpo-a100" in a.line()


def test_preempted_then_requeued_is_preempted_until_admitted_again():
    evicted = ("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: u) due to prioritization")
    waiting = Q.admission(wl(evicted, ("QuotaReserved", "False", "Pending", QUOTA_MSG), ("Admitted", "False", "NoReservation", "")))
    assert waiting.state == "Preempted" and "prioritization" in waiting.message
    # while Kueue evicts it the workload is still Admitted (until the job is suspended and its pods are gone): it is
    # pre-empted already (a follower that asked then said "Admitted" and never "Preempted": test_kueue_e2e.py)
    going = Q.admission(wl(evicted, ("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", "")))
    assert going.state == "Preempted"
    # admitted again: Kueue 0.17's SetQuotaReservation resets Evicted and Preempted to False
    reset = ("Evicted", "False", "QuotaReserved", "Previously: Preempted to accommodate a workload")
    again = Q.admission(wl(reset, ("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", "")))
    assert again.state == "Admitted"


def test_inadmissible_and_finished():
    assert Q.admission(wl(("QuotaReserved", "False", "Inadmissible", "LocalQueue grpo doesn't exist"))).state == "Inadmissible"
    done = Q.admission(wl(("Admitted", "True", "Admitted", ""), ("Finished", "True", "Succeeded", "Job finished")))
    assert done.state == "Finished" and done.reason == "Succeeded"


def test_no_conditions_yet_is_queued():
    assert Q.admission({"metadata": {"name": "w"}}).state == "Queued"


def _job(labels, suspend, conditions=()):
    return {"metadata": {"name": "j", "labels": labels}, "spec": {"runPolicy": {"suspend": suspend}},
            "status": {"conditions": [{"type": t, "status": "True"} for t in conditions]}}


def test_a_suspended_job_with_a_queue_label_is_queued_and_without_is_suspended():
    queued = J.job_state("pytorchjob", _job({"kueue.x-k8s.io/queue-name": "grpo"}, True, ("Created", "Suspended")))
    assert queued.phase == "Queued" and not queued.finished
    assert J.job_state("pytorchjob", _job({}, True, ("Created", "Suspended"))).phase == "Suspended"
    running = J.job_state("pytorchjob", _job({"kueue.x-k8s.io/queue-name": "grpo"}, False, ("Created", "Running")))
    assert running.phase == "Running"


def test_a_rayjob_held_by_kueue_is_queued_before_and_after_it_deployed():
    labels = {"kueue.x-k8s.io/queue-name": "grpo"}
    fresh = {"metadata": {"labels": labels}, "spec": {"suspend": True}, "status": {}}
    assert J.job_state("rayjob", fresh).phase == "Queued"
    again = {"metadata": {"labels": labels}, "spec": {"suspend": True}, "status": {"jobDeploymentStatus": "Suspended"}}
    assert J.job_state("rayjob", again).phase == "Queued"
    assert J.job_state("rayjob", {"metadata": {}, "spec": {}, "status": {"jobDeploymentStatus": "Suspended"}}).phase == "Suspended"


class _Kube:
    def __init__(self, resources, workloads):
        self.resources, self.workloads, self.selectors = resources, workloads, []

    def api_resources(self, group, version):
        return self.resources.get(version)

    def list(self, res, selector=None):
        self.selectors.append((res.version, selector))
        return [w for w in self.workloads if selector is None or
                w["metadata"].get("labels", {}).get(Q.JOB_UID_LABEL) == selector.split("=", 1)[1]]


def test_served_version_prefers_v1beta2_and_falls_back_to_v1beta1():
    assert Q.served_version(_Kube({"v1beta2": ["workloads"], "v1beta1": ["workloads"]}, [])) == "v1beta2"
    assert Q.served_version(_Kube({"v1beta1": ["workloads", "localqueues"]}, [])) == "v1beta1"
    assert Q.served_version(_Kube({}, [])) is None


def test_workload_found_by_job_uid_label_or_owner_reference():
    labelled = {"metadata": {"name": "a", "labels": {Q.JOB_UID_LABEL: "u1"}}}
    owned = {"metadata": {"name": "b", "ownerReferences": [{"uid": "u2"}]}}
    kube = _Kube({"v1beta2": ["workloads"]}, [labelled, owned])
    assert Q.workload_for(kube, {"metadata": {"uid": "u1"}}, "v1beta2")["metadata"]["name"] == "a"
    assert Q.workload_for(kube, {"metadata": {"uid": "u2"}}, "v1beta2")["metadata"]["name"] == "b"
    assert Q.workload_for(kube, {"metadata": {"uid": "u3"}}, "v1beta2") is None
    assert kube.selectors[0] == ("v1beta2", f"{Q.JOB_UID_LABEL}=u1")
