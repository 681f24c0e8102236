"""`launcher doctor`'s node check: do enough distinct nodes match the GPU pods' labels, tolerate-wise,
with room for one pod each (`assess_nodes`, pure, over the nodes and pods `check_nodes` lists)?

Also what `submit` warns when no node carries the GPU pods' labels (`unmatched_gpu_nodes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from launcher.doctor.check import FAIL, OK, WARN, Check
from launcher.render.manifests import gpu_pod_requirements, gpu_pod_tolerations, gpu_requirements
from launcher.spec import gpu as G
from launcher.spec import quantity as Q
from launcher.spec.model import ExperimentSpec

# Taint effects that keep a pod off a node; PreferNoSchedule only discourages.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


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
    """`assess_nodes` over the nodes and their non-terminated pods (pods unknown when listing them is forbidden)."""
    from launcher.kube import NODE, POD, unless_forbidden

    name = "gpu-nodes" if gpus_per_pod(spec) > 0 else "nodes"
    nodes = unless_forbidden(kube.list, NODE)
    if nodes is None:
        return Check(name, WARN, "cannot list nodes (forbidden): GPU labels, taints and capacity not checked",
                     "`launcher rbac` renders the read-only ClusterRole (nodes list) to ask an admin for")
    pods = unless_forbidden(kube.list, POD, all_namespaces=True,
                            field_selector="status.phase!=Succeeded,status.phase!=Failed")
    return assess_nodes(spec, nodes, pods)
