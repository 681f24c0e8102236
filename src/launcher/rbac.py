"""Least-privilege RBAC for people (or CI bots) who run the launcher.

`PERMISSIONS` is the one list of what the launcher's verbs send to the API server; `launcher rbac`
renders it as a namespaced Role (+ RoleBinding) and, for the read-only cluster-scoped checks that a
Role cannot grant, an optional ClusterRole. The launcher degrades gracefully without the
ClusterRole: `submit` then skips the node-capacity warning and trusts the namespace exists.
The chart's `rbac.create` values switch renders the same Role.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher import labels as L


@dataclass(frozen=True)
class Permission:
    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    cluster_scoped: bool = False


PERMISSIONS: tuple[Permission, ...] = (
    Permission("kubeflow.org", "pytorchjobs", ("get", "list", "watch", "create", "delete"),
               "submit/attach, status, list, wait, delete PyTorchJob runs"),
    Permission("ray.io", "rayjobs", ("get", "list", "watch", "create", "delete"),
               "the same for RayJob runs"),
    Permission("ray.io", "rayclusters", ("get", "list"), "status of a RayJob's cluster"),
    Permission("", "configmaps", ("get", "list", "create", "delete"), "the run's experiment config"),
    Permission("", "persistentvolumeclaims", ("get", "list", "create", "delete"),
               "storage.create: the run's claim"),
    Permission("", "pods", ("get", "list", "watch"), "find a run's pods by label, phases, reasons"),
    Permission("", "pods/log", ("get",), "follow and save pod logs"),
    Permission("", "events", ("get", "list", "watch"), "why a pod is Pending/failing"),
    Permission("batch", "jobs", ("get", "list"), "the RayJob submitter Job"),
    Permission("kueue.x-k8s.io", "localqueues", ("get", "list"), "check the named Kueue queue exists"),
    Permission("", "nodes", ("get", "list"), "warn when no node has the requested GPUs", cluster_scoped=True),
    Permission("", "namespaces", ("get",), "check the target namespace exists", cluster_scoped=True),
    Permission("apiextensions.k8s.io", "customresourcedefinitions", ("get", "list"),
               "check the operator's CRD is installed", cluster_scoped=True),
)


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
