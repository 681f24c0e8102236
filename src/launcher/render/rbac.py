"""Least-privilege RBAC for people (or CI bots) who run the launcher.

`CALLS` is the one table of the requests the launcher's verbs send through `Kube` (one row per API
verb on a resource, with the launcher verbs that send it); `PERMISSIONS` and the rules `launcher rbac`
renders are derived from it, so nothing is granted that no code path uses. Not listed, because every
authenticated user may already do them (the default `system:discovery`, `system:basic-user` and
`system:public-info-viewer` ClusterRoles): API discovery (`/api`, `/apis/...`: `Kube.api_group_has`,
`api_groups`, `api_resources`), `/version`, SelfSubjectAccessReview and SelfSubjectReview (doctor).

The cluster-scoped reads go to an optional ClusterRole (a Role cannot grant them); without it the
launcher degrades: `submit` skips the GPU-node warning and trusts the namespace exists, `doctor`
says what it could not check, `status`/`gitops-status` say they cannot read Flux's objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.spec import names as L


@dataclass(frozen=True)
class Call:
    """One API verb on one resource that some launcher verbs send (`used_by`), and why."""

    group: str
    resource: str  # plural; a subresource as "pods/log"
    verb: str  # the RBAC verb: get, list, watch, create, delete
    used_by: tuple[str, ...]
    why: str
    cluster_scoped: bool = False


def _job_calls(group: str, resource: str, kind: str, get_why: str, list_why: str) -> tuple[Call, ...]:
    """The requests on the jobs of a backend other than PyTorchJob (RayJob, TrainJob): the same verbs send them."""
    return (
        Call(group, resource, "get", ("status", "submit", "sweep", "wait", "logs", "delete", "doctor"), get_why),
        Call(group, resource, "list", ("list", "submit", "sweep", "status", "logs", "wait"), list_why),
        Call(group, resource, "watch", ("logs", "submit", "sweep", "wait"), f"follow a {kind} run's state"),
        Call(group, resource, "create", ("submit", "sweep", "doctor"), f"submit a {kind}"),
        Call(group, resource, "delete", ("delete", "doctor"), f"delete a {kind} run"),
    )


# The Kube method behind each RBAC verb: get -> Kube.get / Kube.pod_log (pods/log), list -> Kube.list /
# events_for / list_with_version, watch -> Kube.watch (the follower's informers), create -> Kube.create, delete -> Kube.delete. Keep this table in step with those calls:
# tests/e2e/test_rbac_e2e.py runs every verb on a real API server with exactly the derived Role (a call
# missing here fails there with 403), then removes each row and shows a verb in `used_by` failing without it.
CALLS: tuple[Call, ...] = (
    Call("kubeflow.org", "pytorchjobs", "get", ("status", "submit", "sweep", "wait", "logs", "delete", "doctor"),
         "read a PyTorchJob run by name (submit: attach to the same config)"),
    Call("kubeflow.org", "pytorchjobs", "list", ("list", "submit", "sweep", "status", "logs", "wait", "doctor"),
         "the launcher's runs by label (submit: other runs of the experiment; NAME as an experiment; "
         "the follower's watch starts from a list)"),
    Call("kubeflow.org", "pytorchjobs", "watch", ("logs", "submit", "sweep", "wait", "doctor"),
         "follow a run's state: one watch of the launcher's PyTorchJobs for every run followed"),
    Call("kubeflow.org", "pytorchjobs", "create", ("submit", "sweep", "doctor"), "submit a PyTorchJob (doctor --smoke)"),
    Call("kubeflow.org", "pytorchjobs", "delete", ("delete", "doctor"), "delete a run (doctor --smoke: its job)"),
    *_job_calls("ray.io", "rayjobs", "RayJob",
                "the same for RayJob runs (NAME that is no PyTorchJob is looked up as a RayJob)",
                "list and experiment lookups cover both backends (and a RayJob follower's watch starts from a list)"),
    *_job_calls("trainer.kubeflow.org", "trainjobs", "TrainJob",
                "the same for TrainJob runs (NAME that is neither a PyTorchJob nor a RayJob is looked up as a TrainJob)",
                "list and experiment lookups cover every backend (and a TrainJob follower's watch starts from a list)"),
    Call("trainer.kubeflow.org", "trainingruntimes", "create", ("submit", "sweep", "doctor"),
         "a TrainJob run's own TrainingRuntime (namespaced; never a ClusterTrainingRuntime)"),
    Call("trainer.kubeflow.org", "trainingruntimes", "list", ("delete", "doctor"),
         "find the run's TrainingRuntime by label to delete it"),
    Call("trainer.kubeflow.org", "trainingruntimes", "delete", ("delete", "submit", "sweep", "doctor"),
         "delete it with the run; roll back a failed submit"),
    Call("jobset.x-k8s.io", "jobsets", "get", ("status",),
         "a TrainJob's JobSet: its conditions and restarts (read-only; Kubeflow Trainer creates it)"),
    Call("", "configmaps", "create", ("submit", "sweep", "doctor"), "the run's experiment config"),
    Call("", "configmaps", "list", ("delete", "doctor"), "find the run's ConfigMap by label to delete it"),
    Call("", "configmaps", "delete", ("delete", "submit", "sweep", "doctor"), "delete it with the run; roll back a failed submit"),
    Call("", "persistentvolumeclaims", "create", ("submit", "sweep", "doctor"), "storage.create: the run's claim"),
    Call("", "persistentvolumeclaims", "list", ("delete", "doctor"), "find the run's claim by label"),
    Call("", "persistentvolumeclaims", "delete", ("delete", "submit", "sweep", "doctor"),
         "delete it with the run (unless --keep-pvc); roll back a failed submit"),
    Call("", "pods", "list", ("status", "logs", "wait", "delete", "submit", "sweep", "doctor", "data"),
         "a run's pods by label: phases, reasons, whose logs to follow, wait until gone (data put: its copy pod)"),
    Call("", "pods", "create", ("data",), "data put: the short-lived pod the files are copied through"),
    Call("", "pods", "delete", ("data", "logs", "submit", "watch"),
         "data put: that pod, once the files are in; --on-stall restart: the stuck attempt's pods"),
    # An exec is a websocket upgrade of a GET: Kubernetes 1.35 authorizes it as `get` and (its
    # AuthorizePodWebsocketUpgradeCreatePermission gate, on by default) also as `create`.
    Call("", "pods/exec", "get", ("data", "logs", "submit", "watch"),
         "data put: copy the files in through the pod (and see what is there); a stall's incident: the processes' "
         "Python stacks"),
    Call("", "pods/exec", "create", ("data", "logs", "submit", "watch"), "the same exec (1.35 checks both verbs)"),
    Call("", "pods", "watch", ("logs", "submit", "sweep", "wait", "doctor"),
         "follow the runs' pods (start, restart, finish): one watch of the launcher's pods for every run followed"),
    Call("", "pods/log", "get", ("logs", "submit", "sweep", "wait", "doctor"), "follow and save pod logs"),
    Call("", "events", "list", ("status",), "why a pod is Pending/failing"),
    Call("kueue.x-k8s.io", "localqueues", "get", ("submit", "sweep", "doctor"), "scheduling.queue: the LocalQueue exists"),
    Call("kueue.x-k8s.io", "localqueues", "list", ("doctor",), "name the LocalQueues there are when it does not"),
    Call("kueue.x-k8s.io", "workloads", "list", ("status", "logs", "submit", "sweep"),
         "a queued run's Workload: why Kueue has not admitted it (quota, flavor, pre-emption)"),
    Call("", "nodes", "list", ("submit", "sweep", "doctor"), "GPU nodes: labels, taints, allocatable (else a warning)",
         cluster_scoped=True),
    Call("", "namespaces", "get", ("submit", "sweep", "doctor"), "the target namespace exists", cluster_scoped=True),
    Call("", "pods", "list", ("doctor",), "GPUs/CPU/memory already requested on the matching nodes (all namespaces)",
         cluster_scoped=True),
    Call("kueue.x-k8s.io", "clusterqueues", "get", ("doctor",), "the LocalQueue's ClusterQueue exists",
         cluster_scoped=True),
    # Flux's objects live in Flux's namespace (flux-system), not the run's: a namespace Role cannot grant them
    Call("kustomize.toolkit.fluxcd.io", "kustomizations", "get", ("status", "gitops-status"),
         "a Flux-applied run's Kustomization (its labels name it): last apply, Ready, the history that dates it",
         cluster_scoped=True),
    Call("source.toolkit.fluxcd.io", "gitrepositories", "get", ("status", "gitops-status"),
         "that Kustomization's GitRepository: url, branch, artifact revision", cluster_scoped=True),
)


@dataclass(frozen=True)
class Permission:
    """The verbs on one resource, in one scope: one rule of the Role (or the ClusterRole)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    cluster_scoped: bool = False


def _permissions(calls: tuple[Call, ...]) -> tuple[Permission, ...]:
    """Group `calls` by (group, resource, scope), keeping the table's order."""
    grouped: dict[tuple[str, str, bool], list[Call]] = {}
    for c in calls:
        grouped.setdefault((c.group, c.resource, c.cluster_scoped), []).append(c)
    return tuple(Permission(g, r, tuple(c.verb for c in cs), "; ".join(f"{c.verb}: {c.why}" for c in cs), scoped)
                 for (g, r, scoped), cs in grouped.items())


PERMISSIONS: tuple[Permission, ...] = _permissions(CALLS)


def _rules(cluster_scoped: bool) -> list[dict]:
    return [
        {"apiGroups": [p.group], "resources": [p.resource], "verbs": list(p.verbs)}
        for p in PERMISSIONS
        if p.cluster_scoped == cluster_scoped
    ]


def rbac_objects(namespace: str, subject_kind: str, subject_name: str, *, name: str = "grpo-launcher-user",
                 subject_namespace: str | None = None, cluster_role: bool = True) -> list[dict]:
    """Role + RoleBinding (and ClusterRole + ClusterRoleBinding) granting exactly `PERMISSIONS`."""
    labels = {"app.kubernetes.io/name": "grpo-launcher", "app.kubernetes.io/component": "rbac",
              "app.kubernetes.io/part-of": L.PART_OF, "app.kubernetes.io/managed-by": L.MANAGED_BY}
    subject: dict = {"kind": subject_kind, "name": subject_name}
    if subject_kind == "ServiceAccount":
        subject["namespace"] = subject_namespace or namespace
    else:
        subject["apiGroup"] = "rbac.authorization.k8s.io"
    objects = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": namespace, "labels": labels}, "rules": _rules(False)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [subject]},
    ]
    if cluster_role:
        cname = f"{name}-{namespace}"
        objects += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": cname, "labels": labels}, "rules": _rules(True)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": cname, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cname},
             "subjects": [subject]},
        ]
    return objects
