"""Kueue as the launcher sees it: the API version the cluster serves, a run's Workload, and its admission.

Kueue makes one Workload per job it manages (owner reference to the job, label `kueue.x-k8s.io/job-uid`) and
keeps the job suspended until the Workload is admitted. The Workload's conditions say why a job waits: no
quota reserved yet (and the scheduler's message: which resource, which flavor, how much more), inadmissible
(queue missing or stopped), evicted (pre-empted by a higher priority, or requeued), finished.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.kube.client import Resource

GROUP = "kueue.x-k8s.io"
# v1beta2 first: Kueue 0.16 deprecated v1beta1 (still served next to it); older Kueue serves only v1beta1.
VERSIONS = ("v1beta2", "v1beta1")
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def served_version(kube, plural: str = "workloads") -> str | None:
    """The newest Kueue API version the cluster serves `plural` in, or None when Kueue is not installed."""
    for version in VERSIONS:
        if plural in (kube.api_resources(GROUP, version) or []):
            return version
    return None


def workload_resource(version: str) -> Resource:
    return Resource("Workload", GROUP, version, "workloads")


def workload_for(kube, job: dict, version: str) -> dict | None:
    """The Workload Kueue made for `job` (by its job-uid label, else by owner reference), or None."""
    md = job.get("metadata") or {}
    uid = md.get("uid")
    if not uid:
        return None
    res = workload_resource(version)
    items = kube.list(res, selector=f"{JOB_UID_LABEL}={uid}")
    if not items:  # Kueue versions that do not label: match the owner reference
        items = [w for w in kube.list(res)
                 if any(o.get("uid") == uid for o in (w.get("metadata") or {}).get("ownerReferences") or [])]
    return max(items, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "") if items else None


@dataclass(frozen=True)
class Admission:
    """What a Workload says: one word, why, and where it is (or would be) admitted."""

    state: str  # Queued | Inadmissible | Admitted | Preempted | Evicted | Finished
    reason: str
    message: str
    cluster_queue: str = ""
    flavors: str = ""

    def line(self) -> str:
        where = f" in ClusterQueue {self.cluster_queue}" if self.cluster_queue else ""
        flav = f" (flavors {self.flavors})" if self.flavors else ""
        why = f": {self.reason}" + (f": {self.message}" if self.message else "") if self.reason else ""
        return f"{self.state}{where}{flav}{why}"


def admission(wl: dict) -> Admission:
    """Interpret a Workload's conditions (the same in v1beta1 and v1beta2)."""
    status = wl.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    adm = status.get("admission") or {}
    cq = adm.get("clusterQueue") or ""
    flavors = ", ".join(sorted({f"{r}={f}" for ps in adm.get("podSetAssignments") or []
                                for r, f in (ps.get("flavors") or {}).items()}))

    def true(t: str) -> bool:
        return (conds.get(t) or {}).get("status") == "True"

    def text(t: str) -> tuple[str, str]:
        c = conds.get(t) or {}
        return c.get("reason") or "", " ".join((c.get("message") or "").split())

    if true("Finished"):
        return Admission("Finished", *text("Finished"), cq, flavors)
    # Evicted before Admitted: Kueue marks a pre-empted workload Evicted while it is still Admitted (until the job
    # is suspended and its pods are gone), and resets Evicted when it admits the workload again
    if true("Evicted"):
        reason, message = text("Evicted")
        return Admission("Preempted" if reason == "Preempted" or true("Preempted") else "Evicted",
                         reason, message, cq, flavors)
    if true("Admitted"):
        return Admission("Admitted", *text("Admitted"), cq, flavors)
    reason, message = text("QuotaReserved")
    if reason == "Inadmissible":
        return Admission("Inadmissible", reason, message)
    if true("QuotaReserved"):  # quota reserved, admission checks pending
        return Admission("Queued", "QuotaReserved", "waiting for admission checks", cq, flavors)
    if true("Requeued") or (conds.get("Requeued") or {}).get("reason"):
        r, m = text("Requeued")
        reason, message = reason or r, message or m
    return Admission("Queued", reason or "Pending", message or "waiting for quota")


def localqueue(version: str) -> Resource:
    """Kueue's LocalQueue at `version` (from `served_version(kube, "localqueues")`)."""
    return Resource("LocalQueue", GROUP, version, "localqueues")


def clusterqueue(version: str) -> Resource:
    return Resource("ClusterQueue", GROUP, version, "clusterqueues", namespaced=False)
