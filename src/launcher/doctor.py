"""`launcher doctor`'s checks: can this cluster run this experiment as configured?

Each check returns a `Check`: a status (`ok`, `fail`, `warn`), what was found, and for every failure
the fix (a command, a config field, what to install). The static checks read the cluster through
the `Kube` seam only (`kube` is passed in, never a global); the smoke checks are pure functions of
what a finished smoke job left behind (its pods as last seen and their `[smoke]` lines,
`launcher.smokelog`). The verb (`commands/doctor.py`) runs them in order and prints them.

Order: API server (version) → what the cluster serves (the backend's CRDs, Kueue and the queue) →
nodes that can hold the pods (labels, taints, free GPUs) → RBAC (one SelfSubjectAccessReview per
permission of `launcher.rbac.PERMISSIONS`) → optionally the smoke job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

from launcher import gpu_select as G
from launcher import quantity as Q
from launcher.kube import kueue
from launcher.render import gpu_pod_requirements, gpu_pod_tolerations, gpu_requirements
from launcher.spec import ExperimentSpec

OK, FAIL, WARN = "ok", "fail", "warn"
MARKS = {OK: "✓", FAIL: "✗", WARN: "!"}

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
# Listed for information when served (none besides the backends' own APIs today).
INFO_APIS: tuple[tuple[str, str], ...] = ()
KUEUE_GROUP = kueue.GROUP
KUEUE_VERSIONS = kueue.VERSIONS  # preferred first (launcher.kube.kueue)
KUEUE_INSTALL = ("kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/latest/download/"
                 "manifests.yaml (and enable its pytorchjob/rayjob integration)")
# Taint effects that keep a pod off a node; PreferNoSchedule only discourages.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass
class Check:
    """One line of doctor's output."""

    name: str
    status: str  # OK | FAIL | WARN
    finding: str
    fix: str = ""

    @property
    def mark(self) -> str:
        return MARKS[self.status]

    def line(self, width: int = 14) -> str:
        text = f"{self.mark} {self.name:<{width}} {self.finding}"
        if self.fix:
            text += f" — fix: {self.fix}"
        return " ".join(text.split("\n"))

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "finding": self.finding, "fix": self.fix or None}


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
# 2. what the cluster serves


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
    wanted = {g for apis in BACKEND_APIS.values() for g, _, _ in apis} | {g for g, _ in INFO_APIS} | {KUEUE_GROUP}
    for group in sorted(wanted):
        for version in groups.get(group, []):
            served.resources[(group, version)] = kube.api_resources(group, version) or []
    return served


def _api(group: str, version: str, plural: str) -> str:
    return f"{plural}.{group} {version}"


def check_backend(spec: ExperimentSpec, served: Served) -> Check:
    """The config's backend must be served; the other backends (and TrainJob) are listed for information."""
    others = []
    for backend, apis in BACKEND_APIS.items():
        if backend != spec.backend:
            others += [_api(*a) for a in apis if served.has(*a)]
    for group, plural in INFO_APIS:
        others += [f"{plural}.{group} {v}" for v in served.versions_serving(group, plural)]
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
    for v in KUEUE_VERSIONS:
        if v in versions:
            return v
    return versions[0] if versions else None


def check_kueue(kube, spec: ExperimentSpec, served: Served) -> Check:
    """Which Kueue versions are served; with scheduling.queue: the LocalQueue and its ClusterQueue exist."""
    from launcher.kube import ApiError, Resource

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
    try:
        lq = kube.get(lq_res, queue, namespace=ns)
    except ApiError as exc:
        if exc.status != 403:
            raise
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
    try:
        cq = kube.get(cq_res, cq_name) if cq_name else None
    except ApiError as exc:
        if exc.status != 403:
            raise
        return Check("kueue", OK, f"{base}; ClusterQueue not readable (forbidden), assumed present")
    if cq is None:
        return Check("kueue", FAIL, f"{base}, which does not exist: Kueue will never admit the job",
                     f"ask an admin to create ClusterQueue {cq_name} (or point LocalQueue {queue} at an existing one)")
    return Check("kueue", OK, base)


# --------------------------------------------------------------------------------------------------
# 3. nodes: selector, taints, free capacity

def quantity(value) -> Decimal:
    """A Kubernetes quantity ("500m", "128Gi", "8", 2) as a number (cores, bytes, devices); 0 when unreadable."""
    if value is None:
        return Decimal(0)
    try:
        return Q.parse(value)
    except ValueError:
        return Decimal(0)


def show_quantity(resource: str, amount: Decimal) -> str:
    """Readable amounts: memory in Gi/Mi, CPU in cores, devices as integers."""
    if resource == "memory":
        for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
            if amount >= size:
                v = amount / size
                return f"{v:.0f}{unit}" if v == v.to_integral_value() else f"{v:.1f}{unit}"
        return f"{amount:.0f}"
    v = amount.normalize()
    return f"{v:f}" if v != v.to_integral_value() else f"{int(v)}"


def pod_request(pod: dict, resource: str) -> Decimal:
    """What a pod reserves of `resource`: max(sum of containers, largest init container) + overhead."""
    spec = pod.get("spec") or {}

    def one(c: dict) -> Decimal:
        r = c.get("resources") or {}
        return quantity((r.get("requests") or {}).get(resource, (r.get("limits") or {}).get(resource)))

    main = sum((one(c) for c in spec.get("containers") or []), Decimal(0))
    init = max((one(c) for c in spec.get("initContainers") or []), default=Decimal(0))
    return max(main, init) + quantity((spec.get("overhead") or {}).get(resource))


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' toleration matching (key/operator/value/effect; an empty key with Exists matches all)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return op == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return op == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def spec_tolerations(spec: ExperimentSpec) -> list[dict]:
    """The GPU pods' tolerations as rendered (scheduling.tolerations plus, by default, the GPU taint's)."""
    return gpu_pod_tolerations(spec)


def gpus_per_pod(spec: ExperimentSpec) -> int:
    return int(getattr(spec.resources, "gpus_per_node", 0) or 0)


def pod_selector(spec: ExperimentSpec) -> dict[str, str]:
    """The GPU pods' single-valued node labels as rendered (scheduling.node_selector wins over the GPU preset)."""
    return {r.key: r.values[0] for r in gpu_pod_requirements(spec) if len(r.values) == 1}


def _scheme_keys(spec: ExperimentSpec) -> list[str]:
    res = spec.resources
    keys = [k if k != G.GFD_PRODUCT_LABEL else res.gpu_product_label for k in G.keys(res.gpu_label_scheme)]
    return keys + [k for k in spec.scheduling.node_selector if k not in keys]


def gpu_node_summary(spec: ExperimentSpec, node: NodeView) -> str:
    """`name (label=value, ..., N nvidia.com/gpu)`: a GPU node by the labels the config's scheme reads."""
    res = spec.resources
    shown = [f"{k}={node.labels[k]}" for k in _scheme_keys(spec) if k in node.labels] or \
        [f"{_scheme_keys(spec)[0]}=<unset>"]
    gpus = node.allocatable.get(res.gpu_resource) or Decimal(0)
    return f"{node.name} ({', '.join(shown)}, {show_quantity(res.gpu_resource, gpus)} {res.gpu_resource})"


def unmatched_gpu_nodes(spec: ExperimentSpec, nodes: list[dict]) -> str | None:
    """When no node has the labels the GPU pods require: `no node matches SEL; nodes with GPU: n1 (...)`.

    None when some node matches (or the pods need no node label). What `submit` warns; `doctor`'s
    gpu-nodes check says the same with a fix, `status` the same from a Pending pod's own spec.
    """
    return G.unmatched(gpu_pod_requirements(spec), nodes, spec.resources.gpu_resource, _scheme_keys(spec))


def pod_needs(spec: ExperimentSpec) -> dict[str, Decimal]:
    """What one GPU pod asks for (the data-prep init container is smaller, so the main container decides)."""
    res = spec.resources
    need = {"cpu": quantity(res.cpu), "memory": quantity(res.memory)}
    if gpus_per_pod(spec) > 0:
        need = {res.gpu_resource: Decimal(gpus_per_pod(spec)), **need}
    return need


@dataclass
class NodeView:
    name: str
    labels: dict
    taints: list[dict]
    unschedulable: bool
    ready: bool
    allocatable: dict[str, Decimal]
    used: dict[str, Decimal]

    def free(self, resource: str) -> Decimal:
        return self.allocatable.get(resource, Decimal(0)) - self.used.get(resource, Decimal(0))

    def hard_taints(self, tolerations: list[dict]) -> list[dict]:
        return [t for t in self.taints if t.get("effect") in HARD_EFFECTS
                and not any(tolerates(tol, t) for tol in tolerations)]


def node_views(nodes: list[dict], pods: list[dict] | None, resources: tuple[str, ...]) -> list[NodeView]:
    """Nodes with what non-terminated pods bound to them already request (`pods` None: not known)."""
    used: dict[str, dict[str, Decimal]] = {}
    for p in pods or []:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        u = used.setdefault(node, {})
        for r in resources:
            u[r] = u.get(r, Decimal(0)) + pod_request(p, r)
    out = []
    for n in nodes:
        md, spec, st = n.get("metadata") or {}, n.get("spec") or {}, n.get("status") or {}
        conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
        out.append(NodeView(
            name=md.get("name", "?"), labels=md.get("labels") or {}, taints=spec.get("taints") or [],
            unschedulable=bool(spec.get("unschedulable")), ready=conds.get("Ready", "True") == "True",
            allocatable={r: quantity((st.get("allocatable") or {}).get(r)) for r in resources},
            used=used.get(md.get("name"), {})))
    return out


def _taint(t: dict) -> str:
    return f"{t.get('key')}" + (f"={t['value']}" if t.get("value") else "") + f":{t.get('effect')}"


def _toleration_for(t: dict) -> str:
    tol = {"key": t.get("key"), "operator": "Equal" if t.get("value") else "Exists", "effect": t.get("effect")}
    if t.get("value"):
        tol["value"] = t["value"]
    import json

    return f"--set 'scheduling.tolerations=[{json.dumps(tol)}]'"


def _needs_text(spec: ExperimentSpec, need: dict[str, Decimal]) -> str:
    parts = [f"{show_quantity(r, v)} {'CPU' if r == 'cpu' else r}" if r != "memory" else show_quantity(r, v)
             for r, v in need.items()]
    return f"{spec.resources.nodes} pod(s) × (" + ", ".join(parts) + ")"


def _gpu_label_fix(spec: ExperimentSpec, gpu_nodes: list[NodeView]) -> str:
    """What to set so the GPU pods fit the GPU nodes there are: a gpu_type, a gpu_label_scheme, or null."""
    res = spec.resources
    here = sorted({t for v in gpu_nodes for t in G.identify(res.gpu_label_scheme, v.labels, res.gpu_product_label)})
    if here:
        return f"set resources.gpu_type to a GPU these nodes have: --set resources.gpu_type={here[0]}"
    for scheme in G.SCHEMES:
        found = sorted({t for v in gpu_nodes for t in G.identify(scheme, v.labels)})
        if scheme != res.gpu_label_scheme and found:
            return (f"these nodes carry {scheme} GPU labels: --set resources.gpu_label_scheme={scheme}"
                    + ("" if res.gpu_type in found else f" --set resources.gpu_type={found[0]}"))
    return (f"label the GPU nodes {G.describe(gpu_requirements(spec))}, set resources.gpu_label_scheme to the "
            "platform's labels, or --set resources.gpu_type=null to take any node with the GPU resource")


def assess_nodes(spec: ExperimentSpec, nodes: list[dict], pods: list[dict] | None) -> Check:
    """Pure: do enough distinct nodes match the selector, tolerate-wise, with room for one pod each?"""
    res = spec.resources
    gpus = gpus_per_pod(spec)
    name = "gpu-nodes" if gpus > 0 else "nodes"
    need = pod_needs(spec)
    reqs = gpu_pod_requirements(spec)
    tolerations = spec_tolerations(spec)
    views = node_views(nodes, pods, tuple(need))
    sel_text = G.describe(reqs) or "(no node selector)"
    want = _needs_text(spec, need)
    matching = [v for v in views if G.matches(v.labels, reqs)]
    if not matching:
        finding = f"no node matches {sel_text}"
        if gpus > 0:
            others = [v for v in views if v.allocatable.get(res.gpu_resource, 0) > 0]
            if others:
                shown = ", ".join(gpu_node_summary(spec, v) for v in others[:8])
                more = f" and {len(others) - 8} more" if len(others) > 8 else ""
                finding += f"; nodes with {res.gpu_resource}: {shown}{more}"
                fix = _gpu_label_fix(spec, others)
                extra = [k for k in spec.scheduling.node_selector if any(v.labels.get(k) != spec.scheduling.node_selector[k]
                                                                         for v in others)]
                if extra:
                    fix += f"; and check scheduling.node_selector ({', '.join(extra)})"
            else:
                finding += f"; no node has {res.gpu_resource} allocatable"
                fix = ("install the NVIDIA device plugin or GPU operator on the GPU nodes (it advertises "
                       f"{res.gpu_resource}), or point kubectl at the GPU cluster (--kubeconfig/--context)")
        else:
            fix = "change scheduling.node_selector to labels your nodes carry (kubectl get nodes --show-labels)"
        return Check(name, FAIL, finding, fix)
    usable = [v for v in matching if v.ready and not v.unschedulable and not v.hard_taints(tolerations)]
    if not usable:
        blocked = []
        for v in matching:
            why = "NotReady" if not v.ready else "cordoned" if v.unschedulable else \
                "taint " + ", ".join(_taint(t) for t in v.hard_taints(tolerations))
            blocked.append(f"{v.name} ({why})")
        taints = [t for v in matching for t in v.hard_taints(tolerations)]
        fix = (f"tolerate the taint: {_toleration_for(taints[0])} (scheduling.tolerations)" if taints
               else "uncordon the nodes or wait until they are Ready (kubectl get nodes)")
        return Check(name, FAIL, f"{len(matching)} node(s) match {sel_text} but none can take the pods: "
                     + ", ".join(blocked), fix)
    big = [v for v in usable if all(v.allocatable.get(r, 0) >= amount for r, amount in need.items())]
    if len(big) < res.nodes:
        short = "; ".join(f"{v.name}: " + ", ".join(f"{show_quantity(r, v.allocatable.get(r, Decimal(0)))} {r}"
                                                    for r in need) for v in usable[:8])
        return Check(name, FAIL, f"{want} needed on distinct nodes; {len(usable)} node(s) match {sel_text}, "
                     f"{len(big)} can ever hold one (allocatable {short})",
                     "lower resources.nodes/gpus_per_node/cpu/memory to fit, or add nodes")
    if pods is None:
        return Check(name, WARN, f"{want}: {len(big)} node(s) matching {sel_text} have the capacity; cannot tell "
                     "what is free now (listing pods in all namespaces is forbidden)",
                     "")
    free = [v for v in big if all(v.free(r) >= amount for r, amount in need.items())]
    primary = res.gpu_resource if gpus > 0 else "cpu"
    status = ", ".join(f"{v.name} {show_quantity(primary, v.free(primary))}/"
                       f"{show_quantity(primary, v.allocatable.get(primary, Decimal(0)))} "
                       f"{'GPUs' if gpus > 0 else 'CPUs'} free" for v in big[:8])
    if len(free) < res.nodes:
        return Check(name, WARN, f"{want}: {len(big)} matching node(s) can hold one, but only {len(free)} have "
                     f"room now ({status}); the pods will wait Pending until GPUs/CPU/memory are released",
                     "wait, or free capacity (kubectl get pods -A --field-selector spec.nodeName=NODE)")
    return Check(name, OK, f"{want} fit now on {sel_text}: {status}")


def check_nodes(kube, spec: ExperimentSpec) -> Check:
    from launcher.kube import NODE, POD, ApiError

    name = "gpu-nodes" if gpus_per_pod(spec) > 0 else "nodes"
    try:
        nodes = kube.list(NODE)
    except ApiError as exc:
        if exc.status != 403:
            raise
        return Check(name, WARN, "cannot list nodes (forbidden): GPU labels, taints and capacity not checked",
                     "`launcher rbac` renders the read-only ClusterRole (nodes list) to ask an admin for")
    try:
        pods = kube.list(POD, all_namespaces=True, field_selector="status.phase!=Succeeded,status.phase!=Failed")
    except ApiError as exc:
        if exc.status != 403:
            raise
        pods = None
    return assess_nodes(spec, nodes, pods)


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
    """One SelfSubjectAccessReview per verb of every permission in `launcher.rbac.PERMISSIONS`."""
    from launcher.kube import ApiError
    from launcher.rbac import PERMISSIONS

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
        if denied:
            where = "cluster-wide" if p.cluster_scoped else f"in {ns}"
            item = f"{','.join(denied)} {p.group or 'core'}/{p.resource} {where}"
            (needed if permission_needed(p, spec) else optional).append(item)
    if not needed and not optional:
        return Check("rbac", OK, f"all {total} permissions the launcher uses are granted in {ns} "
                     "(and its cluster-wide reads)")
    fix = rbac_fix(ns, kube.whoami())
    if needed:
        also = f"; also missing (optional): {'; '.join(optional)}" if optional else ""
        return Check("rbac", FAIL, f"missing: {'; '.join(needed)}{also}", fix)
    return Check("rbac", WARN, f"missing, not needed for this config (some pre-flight checks are skipped): "
                 f"{'; '.join(optional)}", fix)


# --------------------------------------------------------------------------------------------------
# 5. the smoke job's verdict (pure)
#
# One doctor check per base name of the workload's checks (`launcher.smokelog`): `writable:tmp` ... `writable:storage`
# are one `smoke: writable`, and a pod check the driver ran on another pod's Ray node (`user@<host>`) counts for that
# pod (a multi-node PyTorchJob's worker prints its own too: the same pod, shown once). The finding names each pod
# (or host) with its detail; a failed check gets the fix of its base name (SMOKE_FIXES).


# The smoke checks by base name (`launcher.smokelog.CHECK_ORDER`): how doctor titles them.
SMOKE_TITLES = {
    "user": "container user",
    "root_readonly": "read-only root filesystem",
    "writable": "writable directories",
    "shm_size": "/dev/shm size",
    "dataset": "dataset (the init container's parquet files)",
    "verl_config": "verl's config",
    "ray_init": "Ray init",
    "ray_nodes": "Ray nodes alive",
    "ray_task": "a Ray task on every node",
    "rendezvous": "pods reach each other (torch.distributed rendezvous)",
    "allreduce": "gloo all-reduce across the pods",
    "nccl_allreduce": "NCCL all-reduce over every GPU",
    "memory": "memory ballast (smoke.memory_mb)",
    "steps": "steps",
}
_ADDR_PORT = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9.-]*):(\d{2,5})\b")


def _reach_fix(spec: ExperimentSpec, failed) -> str:
    ports = sorted({int(p) for c in failed for _, p in _ADDR_PORT.findall(c.detail)})
    port = (f"TCP port {', '.join(map(str, ports))}" if ports else
            "TCP to the master's MASTER_PORT (the training-operator's default: 23456)"
            if spec.backend == "pytorchjob" else
            "TCP to the master's PET_MASTER_PORT (Kubeflow Trainer's: 29500)" if spec.backend == "trainjob" else
            "TCP between the worker pods (the gloo master's port)")
    return (f"the pods cannot reach each other: allow pod-to-pod {port} between the run's pods (on other nodes "
            "too): check NetworkPolicies in the namespace, cloud security groups/firewall rules between the "
            "nodes and the CNI's routes (kubectl get networkpolicy; ping a pod IP from another pod)")


# What to change when a smoke check fails, by base name: a string, or a function of (spec, failed checks).
SMOKE_FIXES = {
    "user": lambda spec, _: (
        f"the container must run as security.run_as_user/run_as_group ({spec.security.run_as_user}:"
        f"{spec.security.run_as_group}) and the image must name that user: set them to the image's user, or "
        "rebuild the image (docker/) with that user"),
    "root_readonly": lambda spec, _: (
        "security.read_only_root_filesystem is true but / or /opt is writable: an admission webhook or the "
        "pod security settings override the container's securityContext; check them (kubectl get pod -o yaml), "
        "or set security.read_only_root_filesystem=false"),
    "writable": lambda spec, _: (
        "/tmp, $HOME and /dev/shm are emptyDir volumes and the storage volume is mounted at "
        f"storage.mount_path ({spec.storage.mount_path}): check the volumes and security settings: the claim "
        f"({spec.storage.claim_name or 'none: an emptyDir'}) must be writable by gid "
        f"security.run_as_group ({spec.security.run_as_group}, the pod's fsGroup), no policy may make the "
        "volumes read-only"),
    "shm_size": lambda spec, _: (
        f"raise resources.shm_size (now {spec.resources.shm_size}) to at least smoke.min_shm "
        f"({spec.smoke.min_shm}): --set resources.shm_size=... (a memory-backed emptyDir; it counts against "
        "resources.memory; NCCL and Ray need it)"),
    "dataset": lambda spec, _: (
        "the data-prep init container did not leave readable parquet files at data.train_path/val_path: check "
        f"data.source_dir ({spec.data.source_dir or 'unset: the dataset is downloaded'}) exists in the image or "
        "on the volume, and read the init container's log (rerun with --keep, `launcher logs`); a hub download "
        "needs model.offline=false and network access"),
    "verl_config": lambda spec, _: (
        "the image's verl rejected the config the launcher generated: fix the config fields the message names "
        "(`launcher render CONFIG` shows the verl overrides), or use an image whose verl is the version the "
        "launcher targets (docker/)"),
    "ray_init": lambda spec, _: _ray_fix(spec),
    "ray_nodes": lambda spec, _: _ray_fix(spec),
    "ray_task": lambda spec, _: _ray_fix(spec),
    "rendezvous": _reach_fix,
    "allreduce": _reach_fix,
    "nccl_allreduce": lambda spec, _: (
        "NCCL failed across the GPUs: check the NCCL environment (network.nccl_socket_ifname must name the "
        "pods' interface, network.nccl_ib only with InfiniBand/RoCE), the GPU drivers and device plugin on the "
        "nodes, and /dev/shm (resources.shm_size); pod-to-pod TCP to MASTER_PORT+1 must be allowed too; rerun "
        "with --set network.nccl_debug=INFO and read the pod logs (--keep)"),
    "memory": lambda spec, _: (
        f"the pods could not hold smoke.memory_mb ({spec.smoke.memory_mb} MiB): raise resources.memory "
        f"(now {spec.resources.memory})"),
    "steps": lambda spec, _: "see the rendezvous/all-reduce and Ray checks above; read the pod logs (--keep)",
}


def _ray_fix(spec: ExperimentSpec) -> str:
    head = ("the head's Service (<job>-master-0, MASTER_ADDR) and Ray's ports (6379, the raylets' ports) "
            "between the pods" if spec.backend == "pytorchjob" else
            "the JobSet's headless Service (<job>-node-0-0.<job>, PET_MASTER_ADDR) and Ray's ports (6379, the "
            "raylets' ports) between the pods" if spec.backend == "trainjob" else
            "the RayCluster's head Service (<job>-...-head-svc) and Ray's ports between the head and the workers")
    return (f"Ray did not come up across the pods: check {head} are reachable (NetworkPolicies, security groups, "
            "CNI), that every pod started (smoke: pods), and that resources.cpu/memory leave Ray room; raise "
            "smoke.connect_timeout_s on a slow cluster")


def smoke_fix(spec: ExperimentSpec, base: str, failed) -> str:
    fix = SMOKE_FIXES.get(base)
    if fix is None:
        return "read the pod logs (rerun with --keep; `launcher logs`)"
    return fix if isinstance(fix, str) else fix(spec, failed)


# Waiting reasons that mean the image could not be pulled or started.
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


@dataclass
class SmokeOutcome:
    """What the smoke job left behind: its name, final state, pods as last seen, their log lines."""

    job: str
    state: object  # launcher.kube.jobs.JobState
    pods: list[dict]
    lines: dict[str, list[str]]
    timed_out: bool = False
    timeout: float = 0.0

    def where(self, host: str) -> str:
        """A pod's hostname (its pod name) as doctor shows pods: `master-0`, `worker-1`, `head-x7k2p`."""
        from launcher.kube import jobs as J

        for p in self.pods:
            if (p.get("metadata") or {}).get("name") == host:
                return J.short_name(p, self.job)
        return host.removeprefix(self.job + "-")


def _started(pod: dict) -> bool:
    st = pod.get("status") or {}
    return any((cs.get("state") or {}).get("running") or (cs.get("state") or {}).get("terminated")
               or cs.get("restartCount") for cs in st.get("containerStatuses") or [])


def _waiting(pod: dict) -> tuple[str, str] | None:
    st = pod.get("status") or {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        w = (cs.get("state") or {}).get("waiting") or {}
        if w.get("reason"):
            return w["reason"], " ".join((w.get("message") or "").split())
    return None


def image_check(spec: ExperimentSpec, outcome: SmokeOutcome) -> Check:
    """Did every pod start from the image? Else the waiting reason or the scheduler's message, and the fix."""
    from launcher.kube import jobs as J

    if not outcome.pods:
        why = "no pod was created" + (f" within {outcome.timeout:g}s" if outcome.timed_out else "")
        return Check("smoke: pods", FAIL, f"{outcome.job}: {why} (job {outcome.state.phase}: "
                     f"{outcome.state.reason or 'no reason given'})",
                     f"`launcher status {outcome.job}` shows the job's conditions and events (with --keep)")
    # One entry per replica (master-0, worker-1, ...), every incarnation of it in creation order: a replica
    # started if any incarnation did. training-operator v1.9 deletes a failed pod and may create it again
    # after the job is already Failed; that late copy never starts and says nothing about the cluster.
    replicas: dict[str, list[dict]] = {}
    for p in outcome.pods:
        replicas.setdefault(J.short_name(p, outcome.job), []).append(p)
    bad = []
    fix = ""
    for short, incarnations in replicas.items():
        if any(_started(p) for p in incarnations):
            continue
        p = incarnations[-1]
        waiting = _waiting(p)
        if waiting and waiting[0] in IMAGE_REASONS:
            bad.append(f"{short}: {waiting[0]} {waiting[1]}".strip())
            fix = fix or (f"check the image name ({spec.image}, field image) exists and the nodes can pull it; "
                          "for a private registry set secrets.image_pull_secrets")
        elif waiting:
            bad.append(f"{short}: {waiting[0]} {waiting[1]}".strip())
            fix = fix or f"`launcher status {outcome.job}` (with --keep) shows the events"
        else:
            problem = J.pod_problem(p) or f"{(p.get('status') or {}).get('phase') or 'Pending'}: not started"
            bad.append(f"{short}: {problem}")
            fix = fix or ("see the gpu-nodes check: adjust resources, scheduling.node_selector or "
                          "scheduling.tolerations, or wait for capacity")
    if bad:
        when = f" within {outcome.timeout:g}s" if outcome.timed_out else ""
        return Check("smoke: pods", FAIL, f"{len(bad)} of {len(replicas)} pod(s) never started{when}: "
                     + "; ".join(bad), fix)
    ran = {short: next(p for p in ps if _started(p)) for short, ps in replicas.items()}
    placed = sorted(f"{short} on {(p.get('spec') or {}).get('nodeName')}"
                    for short, p in ran.items() if (p.get("spec") or {}).get("nodeName"))
    return Check("smoke: pods", OK, f"{len(replicas)} pod(s) started from {spec.image}"
                 + (f" ({', '.join(placed)})" if placed else ""))


def _where(outcome: SmokeOutcome, c) -> str:
    """Where a check ran: the pod that printed it, or the host its driver ran it on (`<name>@<host>`)."""
    return outcome.where(c.host) if c.host else c.pod


def _part(c) -> str:
    return f" {c.part}" if c.part else ""


def _ok_summary(outcome: SmokeOutcome, got) -> tuple[str, list[str]]:
    """One passing check over its parts and pods: a shared detail once, differing ones per pod/host."""
    by_part: dict[str, dict[str, str]] = {}
    for c in got:
        by_part.setdefault(c.part, {})[_where(outcome, c)] = c.detail
    pieces = []
    for part, seen in by_part.items():
        details = list(dict.fromkeys(seen.values()))
        text = details[0] if len(details) == 1 else ", ".join(f"{w}: {d}" for w, d in seen.items())
        pieces.append(f"{part} {text}".strip() if part else text)
    places = sorted({_where(outcome, c) for c in got})
    return "; ".join(p for p in pieces if p) or "ok", places


def _failed_summary(outcome: SmokeOutcome, got) -> str:
    seen = {}
    for c in got:
        if not c.ok:
            seen.setdefault((_where(outcome, c), c.part, c.detail or "FAIL"), None)
    return "; ".join(f"{w}{' ' + part if part else ''}: {detail}" for w, part, detail in seen)


def smoke_checks(spec: ExperimentSpec, outcome: SmokeOutcome) -> list[Check]:
    """The image check, one check per base name any pod reported (`writable:*`, `<check>@<host>` grouped), the
    NCCL expectation on GPU pods, and the verdict."""
    from launcher import smokelog
    from launcher.kube import jobs as J

    checks = [image_check(spec, outcome)]
    if checks[0].status == FAIL:
        return checks
    report = smokelog.collect(outcome.lines)
    for base in report.bases:
        got = report.reports(base)
        title = SMOKE_TITLES.get(base, base)
        if report.verdict(base):
            text, places = _ok_summary(outcome, got)
            checks.append(Check(f"smoke: {base}", OK, f"{title}: {text} ({len(places)} pod(s): "
                                f"{', '.join(places)})"))
        else:
            failed = [c for c in got if not c.ok]
            checks.append(Check(f"smoke: {base}", FAIL, f"{title}: {_failed_summary(outcome, got)}",
                                smoke_fix(spec, base, failed)))
    if checks[-1].name == "smoke: steps" and checks[-1].status == OK:  # the metric lines' timings
        ms, ray = report.metric("smoke/allreduce_ms"), report.metric("smoke/ray_task_ms")
        extra = [f"all-reduce max {max(ms):g}ms" if ms else "", f"Ray task max {max(ray):g}ms" if ray else ""]
        if ms or ray:
            checks[-1].finding += f"; {', '.join(x for x in extra if x)} over {max(len(ms), len(ray))} metric line(s)"
    if gpus_per_pod(spec) > 0 and report.verdict("nccl_allreduce") is None:
        # CPU-only pods (gpus_per_node 0) never run NCCL: no line is expected there.
        why = (" (not run: the rendezvous failed)" if report.verdict("rendezvous") is False else
               " (not run: the gloo all-reduce failed)" if report.verdict("allreduce") is False else "")
        checks.append(Check("smoke: nccl_allreduce", WARN, f"no pod reported the NCCL all-reduce on the GPU pods "
                            f"({spec.resources.gpus_per_node} GPU(s) each){why}",
                            "" if why else "read the pod logs (--keep): the smoke workload runs it on GPU pods"))
    state = outcome.state
    missing = report.without_result
    if report.result is True and not missing and state.succeeded:
        roles = ", ".join(f"{pod} {p.start['role']}" for pod, p in report.pods.items() if p.start.get("role"))
        checks.append(Check("smoke: result", OK, f"{outcome.job} succeeded; every pod reported ok"
                            + (f" ({roles})" if roles else "")))
    elif report.result is False:
        failed = []
        for p in report.pods.values():
            for f in p.failed:
                base, part, host = smokelog.split_name(f)
                failed.append(f"{base}{':' + part if part else ''}{'@' + outcome.where(host) if host else ''}")
        checks.append(Check("smoke: result", FAIL, f"{outcome.job}: FAIL {', '.join(sorted(set(failed)))}".rstrip(),
                            "see the failed checks above"))
    else:
        why = f"timed out after {outcome.timeout:g}s" if outcome.timed_out else \
            f"job {state.phase}: {state.reason or 'no reason given'}"
        problems = [f"{J.short_name(p, outcome.job)}: {J.pod_problem(p)}" for p in outcome.pods if J.pod_problem(p)]
        errors = [f"{pod}: {e}" for pod, p in report.pods.items() for e in p.errors]
        tail = []
        for pod, lines in outcome.lines.items():
            if pod in missing and lines:
                tail.append(f"{pod}: last line {lines[-1][:200]!r}")
        detail = "; ".join(problems + errors + tail)
        who = ", ".join(missing) if missing else "the pods"
        checks.append(Check("smoke: result", FAIL, f"{outcome.job}: {who} printed no `[smoke] result` line ({why})"
                            + (f"; {detail}" if detail else ""),
                            "fix what the pod status says, then rerun `launcher doctor --smoke`" if problems else
                            "the smoke workload refused the config: fix it (`launcher validate CONFIG`)" if errors else
                            "rerun with --keep and read `launcher logs` of the job; an OOMKilled pod needs more "
                            "resources.memory"))
    return checks


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings allowed), 1 when a check failed."""
    return 1 if any(c.status == FAIL for c in checks) else 0


# --------------------------------------------------------------------------------------------------
# The smoke job's spec


DOCTOR_SUFFIX = "-doctor"


def doctor_name(name: str) -> str:
    """`<name>-doctor`, the experiment name shortened so it stays within `spec.NAME_MAX` (38)."""
    from launcher.spec import NAME_MAX

    return name[: NAME_MAX - len(DOCTOR_SUFFIX)].rstrip("-") + DOCTOR_SUFFIX


def smoke_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The experiment as a smoke job: same image, pods, resources, scheduling, backend and `smoke:` section;
    `workload: smoke`, named `<name>-doctor` (so its job never collides with the experiment's own).

    A config that already is a smoke config (configs/smoke-cpu.yaml) only gets the name.
    """
    from launcher.config import spec_from_raw

    raw = spec.model_dump(mode="json")
    raw["workload"] = "smoke"
    raw["name"] = doctor_name(spec.name)
    return spec_from_raw(raw, f"{spec.name} as a smoke job")
