"""What a run's objects say: job state, its pods (by label), and why a pod is stuck.

Pure functions over the dicts the API returns, plus two lookups through `Kube` (`find_run`,
`job_pods`). PyTorchJob state comes from its conditions; RayJob state from `jobDeploymentStatus` and
`jobStatus` (the submitter's exit code can lie: kuberay#3211); TrainJob state (Kubeflow Trainer v2.2) from
its conditions Complete/Failed/Suspended (the JobSet's Completed/Failed copied over by Trainer's JobSet
plugin) and its `jobsStatus` counts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from launcher.spec import names as L
from launcher.errors import BadInput
from launcher.kube.client import JOB_RESOURCES, POD, RAYJOB, PYTORCHJOB, TRAININGRUNTIME, TRAINJOB, Kube

BACKENDS = tuple(JOB_RESOURCES)  # every backend's job kind: lookups, list and the watch cover them all
# The kinds a backend's submit creates (a TrainJob also its own TrainingRuntime): what must be served.
BACKEND_KINDS = {"pytorchjob": (PYTORCHJOB,), "rayjob": (RAYJOB,), "trainjob": (TRAINJOB, TRAININGRUNTIME)}

# Labels the Job controller puts on a Job's pods; the RayJob submitter Job is named like the RayJob.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
RAY_CLUSTER_LABEL = "ray.io/cluster"
# Containers whose log carries the training output, per pod kind (first match wins).
MAIN_CONTAINERS = ("pytorch", "node", "ray-head", "ray-job-submitter", "ray-worker")
# What JobSet v0.11 puts on a TrainJob's pods (api/jobset/v1alpha2/jobset_types.go); the JobSet is named
# like the TrainJob. The pod's node rank is its Indexed Job's completion index.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class JobRef:
    """A run: backend, name and the job object as last read."""

    backend: str  # "pytorchjob" | "rayjob" | "trainjob"
    name: str
    obj: dict

    @property
    def resource(self):
        return JOB_RESOURCES[self.backend]

    @property
    def labels(self) -> dict:
        return (self.obj.get("metadata") or {}).get("labels") or {}

    @property
    def experiment(self) -> str:
        return self.labels.get(L.EXPERIMENT_LABEL, "")


@dataclass(frozen=True)
class JobState:
    """The job's state in one word plus whether it is over and why."""

    phase: str  # Pending | Queued | Suspended | Running | Restarting | Succeeded | Failed | Unknown
    finished: bool
    succeeded: bool
    reason: str = ""
    conditions: list = field(default_factory=list)


def owned(obj: dict) -> bool:
    """Objects the launcher may touch carry app.kubernetes.io/part-of=grpo-launcher."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/part-of") == L.PART_OF


def job_state(backend: str, obj: dict | None) -> JobState:
    """Interpret a PyTorchJob's conditions or a RayJob's deployment/job status.

    A suspended job with a Kueue queue label is Queued: Kueue holds it until its Workload is admitted (and
    suspends it again when it is pre-empted); `launcher.kube.kueue` says why it waits."""
    if obj is None:
        return JobState("Deleted", True, False, "the job was deleted")
    status = obj.get("status") or {}
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(L.KUEUE_QUEUE_LABEL)

    def held(reason: str, conds=()) -> JobState:
        if queue:
            return JobState("Queued", False, False, reason or f"waiting for Kueue to admit it (LocalQueue {queue})",
                            list(conds))
        return JobState("Suspended", False, False, reason, list(conds))

    if backend == "rayjob":
        dep = status.get("jobDeploymentStatus") or ""
        js = status.get("jobStatus") or ""
        reason = " ".join(x for x in (status.get("reason") or "", status.get("message") or "") if x)
        if dep == "Complete":
            ok = js == "SUCCEEDED"
            return JobState("Succeeded" if ok else "Failed", True, ok, reason or f"jobStatus {js or '?'}")
        if dep in ("Failed", "ValidationFailed"):
            return JobState("Failed", True, False, reason or dep)
        if dep in ("Suspended", "Suspending") or (not dep and (obj.get("spec") or {}).get("suspend")):
            return held(reason)
        if dep == "Retrying":
            return JobState("Restarting", False, False, reason)
        if dep == "Running":
            return JobState("Running", False, False, reason)
        return JobState("Pending", False, False, reason or (dep or "not started"))
    if backend == "trainjob":
        return _trainjob_state(obj, held)
    conds = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    by_type = {c.get("type"): c for c in conds}
    for kind, ok in (("Succeeded", True), ("Failed", False)):
        if kind in by_type:
            return JobState(kind, True, ok, _cond_text(by_type[kind]), conds)
    if (obj.get("spec") or {}).get("runPolicy", {}).get("suspend") or "Suspended" in by_type:
        return held(_cond_text(by_type.get("Suspended", {})), conds)
    for kind in ("Restarting", "Running"):
        if kind in by_type:
            return JobState(kind, False, False, _cond_text(by_type[kind]), conds)
    return JobState("Pending", False, False, _cond_text(by_type.get("Created", {})), conds)


def _trainjob_state(obj: dict, held) -> JobState:
    """A TrainJob's conditions (trainer v2.2 `trainjob_types.go`): Complete, Failed (reasons such as
    DeadlineExceeded, TrainingRuntimeNotSupported, or the JobSet's FailedJobs) and Suspended. v2.2 has no
    Running condition: the JobSet's replicated-Job counts (`status.jobsStatus`) say whether pods run."""
    status = obj.get("status") or {}
    conds = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    by_type = {c.get("type"): c for c in conds}
    if "Complete" in by_type:
        return JobState("Succeeded", True, True, _cond_text(by_type["Complete"]), conds)
    if "Failed" in by_type:
        return JobState("Failed", True, False, _cond_text(by_type["Failed"]), conds)
    if (obj.get("spec") or {}).get("suspend") or "Suspended" in by_type:
        return held(_cond_text(by_type.get("Suspended", {})), conds)
    jobs = status.get("jobsStatus") or []
    count = {k: sum(j.get(k) or 0 for j in jobs) for k in ("ready", "active", "failed")}
    if count["failed"]:  # a failed Job the JobSet recreates with the others (failurePolicy.maxRestarts)
        return JobState("Restarting", False, False, f"{count['failed']} Job(s) failed; the JobSet restarts them",
                        conds)
    # `ready`: Jobs whose pods are all ready or done; `active`: Jobs with a pod running or still pending
    if count["ready"]:
        return JobState("Running", False, False, f"{count['ready']} Job(s) ready", conds)
    if count["active"]:
        return JobState("Pending", False, False, "the JobSet's pods are starting", conds)
    return JobState("Pending", False, False, "waiting for the JobSet's Jobs" if jobs else "JobSet not created yet",
                    conds)


def _cond_text(c: dict) -> str:
    return " ".join(x for x in (c.get("reason") or "", c.get("message") or "") if x)


def served_backends(kube: Kube) -> list[str]:
    """The backends whose kinds the cluster serves (API discovery, one request per group/version)."""
    return [b for b, kinds in BACKEND_KINDS.items() if all(kube.api_group_has(k) for k in kinds)]


def find_run(kube: Kube, name: str, backends=BACKENDS) -> JobRef:
    """NAME is a job name, or an experiment name meaning its newest run (BadInput when neither)."""
    for backend in backends:
        obj = kube.get(JOB_RESOURCES[backend], name)
        if obj is not None:
            if not owned(obj):
                raise BadInput(f"{JOB_RESOURCES[backend].kind} {name} in namespace {kube.namespace} was not created "
                               f"by the launcher (no label app.kubernetes.io/part-of={L.PART_OF}); not touching it")
            return JobRef(backend, name, obj)
    runs = list_runs(kube, experiment=name, backends=backends)
    if runs:
        return max(runs, key=lambda r: (r.obj.get("metadata") or {}).get("creationTimestamp") or "")
    raise BadInput(f"no run named {name!r} in namespace {kube.namespace} (neither a job nor an experiment "
                   f"with label {L.EXPERIMENT_LABEL}={name})")


def list_runs(kube: Kube, experiment: str | None = None, backends=BACKENDS, *,
              all_namespaces: bool = False) -> list[JobRef]:
    """The launcher's jobs in the namespace, or in every one (kubectl get -A: one cluster-wide list per backend),
    optionally of one experiment. Skips a backend whose CRD is absent."""
    from launcher.kube.client import ApiError

    selector = L.OWNED_SELECTOR + (f",{L.EXPERIMENT_LABEL}={experiment}" if experiment else "")
    out = []
    for backend in backends:
        try:
            items = kube.list(JOB_RESOURCES[backend], selector=selector, all_namespaces=all_namespaces)
        except ApiError as exc:
            if exc.status == 404:  # CRD not installed: no runs of that backend
                continue
            raise
        out += [JobRef(backend, i["metadata"]["name"], i) for i in items]
    return out


def pod_selectors(ref: JobRef) -> list[str]:
    """Label selectors of the run's pods: our template labels; for RayJob also the submitter Job's pod."""
    if ref.backend != "rayjob":
        return [L.instance_selector(ref.name)]
    # KubeRay overwrites app.kubernetes.io/name on Ray pods (with "kuberay"), so select them by our instance
    # label alone and by the RayCluster the RayJob reports; the submitter by the Job controller's label.
    sels = [f"{L.INSTANCE_LABEL}={ref.name}"]
    cluster = (ref.obj.get("status") or {}).get("rayClusterName")
    if cluster:
        sels.append(f"{RAY_CLUSTER_LABEL}={cluster}")
    return sels + [f"{lbl}={ref.name}" for lbl in JOB_NAME_LABELS]


def job_pods(kube: Kube, ref: JobRef) -> list[dict]:
    """The run's pods, found by label (never by name), oldest first, each once: one LIST per selector."""
    return _dedupe_sorted(ref, [(sel, kube.list(POD, selector=sel)) for sel in pod_selectors(ref)])


def select_pods(ref: JobRef, pods: list[dict]) -> list[dict]:
    """The run's pods among `pods` (e.g. a watch of every launcher pod), by the same selectors as `job_pods`."""
    matched = []
    for sel in pod_selectors(ref):
        want = dict(kv.split("=", 1) for kv in sel.split(","))
        matched.append((sel, [p for p in pods if all(((p.get("metadata") or {}).get("labels") or {}).get(k) == v
                                                     for k, v in want.items())]))
    return _dedupe_sorted(ref, matched)


def _dedupe_sorted(ref: JobRef, by_selector: list[tuple[str, list[dict]]]) -> list[dict]:
    seen: dict[str, dict] = {}
    for sel, pods in by_selector:
        for pod in pods:
            md = pod.get("metadata") or {}
            if sel.startswith(JOB_NAME_LABELS) and not _owned_by_job(md, ref.name):
                continue  # a batch Job that happens to share the name but is not the RayJob's submitter
            seen.setdefault(md.get("uid") or md.get("name"), pod)
    return sorted(seen.values(), key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                                 p["metadata"]["name"]))


def _owned_by_job(md: dict, job: str) -> bool:
    return any(o.get("kind") == "Job" and o.get("name") == job for o in md.get("ownerReferences") or [])


def is_submitter(pod: dict) -> bool:
    """A RayJob's submitter pod: a batch Job's pod that is no Ray pod (a TrainJob's JobSet pods are Job pods too)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return (any(k in labels for k in JOB_NAME_LABELS) and RAY_CLUSTER_LABEL not in labels
            and JOBSET_NAME_LABEL not in labels)


def short_name(pod: dict, job: str) -> str:
    """`master-0`, `worker-1`, `submitter`, `head-x7k2p`: the pod name without the job prefix; a TrainJob's
    node pod (`<job>-node-0-<i>-<suffix>`) is `node-<i>`, its rank, stable across the JobSet's restarts."""
    name = pod["metadata"]["name"]
    if is_submitter(pod):
        return "submitter"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(JOBSET_NAME_LABEL) == job and labels.get(COMPLETION_INDEX, "").isdigit():
        return f"node-{labels[COMPLETION_INDEX]}"
    if name.startswith(job + "-"):
        rest = name[len(job) + 1:]
        if RAY_CLUSTER_LABEL in labels and "-" in rest:  # <job>-<5 chars>-head-<5 chars>: drop the cluster suffix
            head, _, tail = rest.partition("-")
            return tail if len(head) == 5 else rest
        return rest
    return name


def main_container(pod: dict, wanted: str | None = None) -> str | None:
    """The container whose log to follow: `wanted`, else the training one, else the first."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    if wanted:
        return wanted if wanted in names else None
    return next((n for n in MAIN_CONTAINERS if n in names), names[0] if names else None)


def container_status(pod: dict, container: str) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((cs for cs in statuses if cs.get("name") == container), {})


def pod_finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_problem(pod: dict) -> str | None:
    """Why a pod is not (or no longer) running, in the words a user needs; None when it is fine."""
    st = pod.get("status") or {}
    if st.get("reason") == "Evicted":
        return f"Evicted: {st.get('message') or ''}".strip()
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason') or 'Unschedulable'}: {c.get('message') or ''}".strip()
    init = [(cs, True) for cs in st.get("initContainerStatuses") or []]
    for cs, is_init in init + [(cs, False) for cs in st.get("containerStatuses") or []]:
        state = cs.get("state") or {}
        w = state.get("waiting") or {}
        now = state.get("terminated") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        oom = now if now.get("reason") == "OOMKilled" else last if last.get("reason") == "OOMKilled" else None
        if w.get("reason") in ("ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
                               "CreateContainerError", "InvalidImageName", "RunContainerError") \
                or (w.get("reason") == "CrashLoopBackOff" and oom is None):
            extra = f" (last exit: {last['reason']})" if last.get("reason") else ""
            return f"{w['reason']} in container {cs.get('name')}: {w.get('message') or ''}{extra}".strip()
        if oom is not None:
            return oom_problem(pod, cs.get("name") or "?", oom, init=is_init,
                               restarting=w.get("reason") == "CrashLoopBackOff")
        if now.get("exitCode") not in (None, 0):
            t = state["terminated"]
            return f"container {cs.get('name')} exited {t.get('exitCode')} ({t.get('reason') or 'Error'})"
    return None


def memory_limit(pod: dict, container: str) -> str | None:
    """The memory limit of a container (or init container) as written in the pod spec, if any."""
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if c.get("name") == container:
            return ((c.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def oom_problem(pod: dict, container: str, terminated: dict, *, init: bool = False, restarting: bool = False) -> str:
    """`container X was OOMKilled (memory limit 512Mi, exit 137); raise resources.memory` (the field to change)."""
    limit = memory_limit(pod, container)
    role = ((pod.get("metadata") or {}).get("labels") or {}).get(L.ROLE_LABEL)
    if init:
        fix = "the init container's limit is fixed by the launcher (render.py init_resources); report it"
    elif role == "head":
        fix = "raise resources.head_memory"
    elif role == "submitter":
        fix = "the RayJob submitter's limit is fixed by the launcher (render.py); report it"
    else:
        fix = "raise resources.memory"
    what = f"memory limit {limit}" if limit else "no memory limit: the node ran out of memory"
    exit_code = terminated.get("exitCode")
    detail = f"{what}, exit {exit_code}" if exit_code is not None else what
    again = ", restarting (CrashLoopBackOff)" if restarting else ""
    return f"container {container} was OOMKilled ({detail}{again}); {fix}"


def pending_reason(pod: dict) -> str:
    """Why a Pending pod is pending (scheduler message, image pull, ...), or 'waiting to start'."""
    return pod_problem(pod) or "waiting to start (scheduled, containers creating)"


def age(timestamp: str | None, now: dt.datetime | None = None) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    if not timestamp:
        return "?"
    t = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    s = int(((now or dt.datetime.now(dt.timezone.utc)) - t).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size * (2 if unit != "m" else 1):
            return f"{s // size}{unit}"
    return f"{max(s, 0)}s"
