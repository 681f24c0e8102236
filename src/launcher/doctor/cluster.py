"""`launcher doctor`'s static checks: what the cluster answers, serves and lets this user do.

They read the cluster through the `Kube` seam only (`kube` is passed in, never a global), in the order the
verb runs them: the API server (version) → the namespace → what the cluster serves (the backend's CRDs,
Kueue and the queue) → [the nodes, `launcher.doctor.nodes`] → RBAC (one SelfSubjectAccessReview per
permission of `launcher.render.rbac.PERMISSIONS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.doctor.check import FAIL, OK, WARN, Check
from launcher.kube import kueue
from launcher.spec.model import ExperimentSpec

# What to install when a backend's API is not served (versions as hack/cluster/versions.sh pins them).
OPERATORS = {
    "pytorchjob": ("the Kubeflow Training Operator (v1)",
                   'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/overlays/'
                   'standalone?ref=v1.9.0"'),
    "rayjob": ("KubeRay",
               "helm repo add kuberay https://ray-project.github.io/kuberay-helm/ && "
               "helm install kuberay-operator kuberay/kuberay-operator --version 1.6.2"),
    "trainjob": ("Kubeflow Trainer v2 (on JobSet)",
                 'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/manager'
                 '?ref=v2.2.0" (it brings JobSet v0.11)'),
}
# The API each backend needs: (group, version, plural).
BACKEND_APIS = {
    "pytorchjob": (("kubeflow.org", "v1", "pytorchjobs"),),
    "rayjob": (("ray.io", "v1", "rayjobs"), ("ray.io", "v1", "rayclusters")),
    "trainjob": (("trainer.kubeflow.org", "v1alpha1", "trainjobs"), ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
                 ("jobset.x-k8s.io", "v1alpha2", "jobsets")),
}
KUEUE_GROUP = kueue.GROUP
KUEUE_VERSIONS = kueue.VERSIONS  # preferred first (launcher.kube.kueue)
KUEUE_INSTALL = ("kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/latest/download/"
                 "manifests.yaml (and enable its pytorchjob/rayjob/trainjob integration)")


# --------------------------------------------------------------------------------------------------
# 1. the API server


def check_api_server(kube) -> Check:
    """Reachable, and which Kubernetes it runs. Raises `ClusterError` when it is not (the verb exits 3)."""
    v = kube.version()
    return Check("api-server", OK, f"{kube.server} answers: Kubernetes {v.get('gitVersion') or '?'}"
                 + (f" ({v.get('platform')})" if v.get("platform") else ""))


def unreachable(kube, exc: Exception) -> Check:
    return Check("api-server", FAIL, str(exc),
                 f"check the kubeconfig (--kubeconfig/--context, $KUBECONFIG) and that {kube.server} is up: "
                 "kubectl cluster-info")


# --------------------------------------------------------------------------------------------------
# 2. the namespace


def check_namespace(kube, spec: ExperimentSpec) -> Check:
    """The experiment's namespace exists (assumed to when Namespace objects cannot be read)."""
    from launcher.kube import FORBIDDEN, NAMESPACE, unless_forbidden

    ns = spec.scheduling.namespace
    found = unless_forbidden(kube.get, NAMESPACE, ns, default=FORBIDDEN)
    return _presence("namespace", found, present=ns,
                     forbidden=f"{ns} (cannot read Namespace objects: assumed to exist)",
                     absent=f"namespace {ns} does not exist",
                     fix=f"kubectl create namespace {ns}, or use another: -n NAMESPACE (scheduling.namespace)")


def _presence(name: str, found, *, present: str, forbidden: str, absent: str, fix: str) -> Check:
    """A check of one object read with `unless_forbidden(..., default=FORBIDDEN)`: there, unreadable (assumed
    there, since a namespaced user often cannot read cluster-scoped objects) or missing."""
    from launcher.kube import FORBIDDEN

    if found is FORBIDDEN:
        return Check(name, OK, forbidden)
    if found is None:
        return Check(name, FAIL, absent, fix)
    return Check(name, OK, present)


# --------------------------------------------------------------------------------------------------
# 3. what the cluster serves


@dataclass
class Served:
    """API discovery: group -> versions (preferred first), and (group, version) -> resource names."""

    groups: dict[str, list[str]]
    resources: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def has(self, group: str, version: str, plural: str) -> bool:
        return plural in (self.resources.get((group, version)) or [])

    def versions_serving(self, group: str, plural: str) -> list[str]:
        return [v for v in self.groups.get(group, []) if self.has(group, v, plural)]


def discover(kube) -> Served:
    """The groups the checks care about, with their resources (one request per served group/version)."""
    groups = kube.api_groups()
    served = Served(groups)
    wanted = {g for apis in BACKEND_APIS.values() for g, _, _ in apis} | {KUEUE_GROUP}
    for group in sorted(wanted):
        for version in groups.get(group, []):
            served.resources[(group, version)] = kube.api_resources(group, version) or []
    return served


def _api(group: str, version: str, plural: str) -> str:
    return f"{plural}.{group} {version}"


def check_backend(spec: ExperimentSpec, served: Served) -> Check:
    """The config's backend must be served; the other backends (and TrainJob) are listed for information."""
    others = [_api(*a) for backend, apis in BACKEND_APIS.items() if backend != spec.backend
              for a in apis if served.has(*a)]
    also = f"; also served: {', '.join(others)}" if others else ""
    missing = [a for a in BACKEND_APIS[spec.backend] if not served.has(*a)]
    if not missing:
        return Check("backend", OK, f"{spec.backend}: " + ", ".join(_api(*a) for a in BACKEND_APIS[spec.backend])
                     + f" served{also}")
    name, install = OPERATORS[spec.backend]
    alternatives = [b for b, apis in BACKEND_APIS.items() if b != spec.backend and all(served.has(*a) for a in apis)]
    fix = f"install {name}: {install}"
    if alternatives:
        fix += f"; or use a backend this cluster serves: --backend {alternatives[0]}"
    return Check("backend", FAIL, f"{spec.backend} needs " + ", ".join(_api(*a) for a in missing)
                 + f", which the cluster does not serve: {name} is not installed{also}", fix)


def kueue_version(served: Served) -> str | None:
    """The Kueue API version to use for LocalQueue/ClusterQueue, or None when Kueue is not installed."""
    versions = served.versions_serving(KUEUE_GROUP, "localqueues")
    return next((v for v in KUEUE_VERSIONS if v in versions), versions[0] if versions else None)


def check_kueue(kube, spec: ExperimentSpec, served: Served) -> Check:
    """Which Kueue versions are served; with scheduling.queue: the LocalQueue and its ClusterQueue exist."""
    from launcher.kube import FORBIDDEN, ApiError, unless_forbidden

    versions = served.versions_serving(KUEUE_GROUP, "localqueues")
    queue = spec.scheduling.queue
    ns = spec.scheduling.namespace
    if not queue:
        what = f"kueue.x-k8s.io {', '.join(versions)} served" if versions else "Kueue not installed"
        return Check("kueue", OK, f"not used (scheduling.queue unset); {what}")
    if not versions:
        return Check("kueue", FAIL, f"scheduling.queue is {queue} but Kueue is not installed (no kueue.x-k8s.io "
                     "API: LocalQueue v1beta1/v1beta2)",
                     f"install Kueue: {KUEUE_INSTALL}; or run without a queue: --set scheduling.queue=null")
    ver = kueue_version(served)
    lq_res = kueue.localqueue(ver)
    lq = unless_forbidden(kube.get, lq_res, queue, namespace=ns, default=FORBIDDEN)
    if lq is FORBIDDEN:
        return Check("kueue", WARN, f"kueue.x-k8s.io {', '.join(versions)} served; cannot read LocalQueue {queue} "
                     f"in {ns} (forbidden)", "`launcher rbac` renders the Role with localqueues get/list")
    if lq is None:
        try:
            names = sorted(q["metadata"]["name"] for q in kube.list(lq_res, namespace=ns))
        except ApiError:
            names = []
        there = f"; LocalQueues in {ns}: {', '.join(names)}" if names else f"; {ns} has no LocalQueue"
        return Check("kueue", FAIL, f"LocalQueue {queue} does not exist in namespace {ns} (kueue.x-k8s.io "
                     f"{', '.join(versions)} served){there}",
                     (f"--set scheduling.queue={names[0]}, or " if names else "")
                     + f"ask an admin to create LocalQueue {queue} in {ns} (spec.clusterQueue: <a ClusterQueue>)")
    cq_name = (lq.get("spec") or {}).get("clusterQueue") or ""
    cq_res = kueue.clusterqueue(ver)
    base = f"LocalQueue {queue} in {ns} → ClusterQueue {cq_name or '?'} (kueue.x-k8s.io {', '.join(versions)} served)"
    cq = unless_forbidden(kube.get, cq_res, cq_name, default=FORBIDDEN) if cq_name else None
    return _presence("kueue", cq, present=base,
                     forbidden=f"{base}; ClusterQueue not readable (forbidden), assumed present",
                     absent=f"{base}, which does not exist: Kueue will never admit the job",
                     fix=f"ask an admin to create ClusterQueue {cq_name} (or point LocalQueue {queue} at an existing one)")


# --------------------------------------------------------------------------------------------------
# 4. RBAC


def permission_needed(p, spec: ExperimentSpec) -> bool:
    """Whether this experiment's verbs fail without `p` (else doctor only warns)."""
    if p.cluster_scoped:
        return False  # read-only pre-flight checks; the launcher degrades without them
    if p.group == "kubeflow.org":
        return spec.backend == "pytorchjob"
    if p.group == "ray.io" or (p.group == "batch" and p.resource == "jobs"):
        return spec.backend == "rayjob"
    if p.group in ("trainer.kubeflow.org", "jobset.x-k8s.io"):
        return spec.backend == "trainjob" and p.group == "trainer.kubeflow.org"  # the JobSet read is optional
    if p.group == KUEUE_GROUP:
        return bool(spec.scheduling.queue)
    return True


def rbac_fix(ns: str, user: str | None) -> str:
    if user and user.startswith("system:serviceaccount:"):
        sa_ns, _, sa = user.removeprefix("system:serviceaccount:").partition(":")
        who = f"--serviceaccount {sa_ns}:{sa}"
    else:
        who = f"--user {user}" if user else "--user <you>"
    return f"ask a cluster admin to apply the Role `launcher rbac -n {ns} {who}` renders"


def check_rbac(kube, spec: ExperimentSpec) -> Check:
    """One SelfSubjectAccessReview per verb of every permission in `launcher.render.rbac.PERMISSIONS`."""
    from launcher.kube import ApiError
    from launcher.render.rbac import CALLS, PERMISSIONS

    # what only `data put` (its copy pod), a stall's incident (exec) and --on-stall restart send: never needed to run
    data_only = {(c.group, c.resource, c.verb) for c in CALLS
                 if c.resource == "pods/exec" or (c.resource == "pods" and c.verb in ("create", "delete"))}
    ns = spec.scheduling.namespace
    needed: list[str] = []
    optional: list[str] = []
    total = 0
    for p in PERMISSIONS:
        resource, _, sub = p.resource.partition("/")
        denied = []
        for verb in p.verbs:
            total += 1
            try:
                allowed, _ = kube.access_review(verb, p.group, resource, subresource=sub,
                                                namespace=None if p.cluster_scoped else ns)
            except ApiError as exc:
                if exc.status not in (403, 404):
                    raise
                return Check("rbac", WARN, f"cannot review access (SelfSubjectAccessReview: {exc.status}); "
                             "permissions not checked", "")
            if not allowed:
                denied.append(verb)
        where = "cluster-wide" if p.cluster_scoped else f"in {ns}"
        for verbs, data_put in (([v for v in denied if (p.group, p.resource, v) not in data_only], False),
                                ([v for v in denied if (p.group, p.resource, v) in data_only], True)):
            if verbs:
                item = f"{','.join(verbs)} {p.group or 'core'}/{p.resource} {where}" + (" (data put, incident stacks, --on-stall restart)" if data_put else "")
                (needed if permission_needed(p, spec) and not data_put else optional).append(item)
    if not needed and not optional:
        return Check("rbac", OK, f"all {total} permissions the launcher uses are granted in {ns} "
                     "(and its cluster-wide reads)")
    fix = rbac_fix(ns, kube.whoami())
    if needed:
        also = f"; also missing (optional): {'; '.join(optional)}" if optional else ""
        return Check("rbac", FAIL, f"missing: {'; '.join(needed)}{also}", fix)
    return Check("rbac", WARN, f"missing, not needed for this config (some pre-flight checks are skipped): "
                 f"{'; '.join(optional)}", fix)
