"""Which nodes a GPU pod may land on: the per-platform GPU label table and what it renders to.

`resources.gpu_type` names a GPU; `resources.gpu_label_scheme` names the platform whose node labels
say which GPU a node has. `TABLE` (the one place these labels live) maps both to the node labels the
pod requires. Everything derives from it: the rendered `nodeSelector`/`nodeAffinity`
(`launcher.render.manifests`), the chart (`hack/gen_chart.py` exports it), the docs (README "GPU selection")
and the pre-flight messages (`submit`, `status`, `doctor`).

A requirement with one value is rendered as a `nodeSelector` entry; one with several values (a GPU
that a platform sells on more than one machine type, e.g. AKS VM sizes) as a required
`nodeAffinity` `In` expression, because `nodeSelector` cannot say "one of". Where a platform's GPU
name does not tell two types apart (Karpenter names both A100s `a100`), the table adds a second
label (the GPU memory in MiB) to the same entry.

Sources (checked 2026-12):
- gfd: NVIDIA GPU feature discovery (k8s-device-plugin, docs/gpu-feature-discovery) labels
  `nvidia.com/gpu.product` with the NVML device name, spaces replaced by `-`.
- gke: https://cloud.google.com/kubernetes-engine/docs/how-to/gpus (node label
  `cloud.google.com/gke-accelerator`; values as in https://cloud.google.com/compute/docs/gpus:
  nvidia-tesla-a100 is the 40 GB A100 of a2-highgpu/megagpu, nvidia-a100-80gb the a2-ultragpu one,
  nvidia-h100-80gb the A3 High/Edge H100 and nvidia-h100-mega-80gb the A3 Mega one, nvidia-h200-141gb
  the A3 Ultra H200). GKE offers neither an L40S nor a PCIe A100 80GB.
- karpenter: https://karpenter.sh/docs/reference/instance-types/ and
  https://karpenter.sh/docs/concepts/scheduling/#well-known-labels (`karpenter.k8s.aws/instance-gpu-name`
  from EC2 DescribeInstanceTypes, lower-cased; `karpenter.k8s.aws/instance-gpu-memory` in MiB):
  p4d a100/40960, p4de a100/81920, p5 h100, p5e/p5en h200, g6e l40s. AWS offers no PCIe A100 80GB.
- aks: https://learn.microsoft.com/azure/aks/use-labels (`kubernetes.azure.com/accelerator: nvidia`
  on GPU node pools; it names no model) and the VM sizes of
  https://learn.microsoft.com/azure/virtual-machines/sizes/overview (GPU accelerated), matched on
  the well-known `node.kubernetes.io/instance-type` label. Azure offers no L40S VM size.
None of these was read from a live managed cluster; Karpenter's memory values (EC2's MiB figures) and
GFD's `NVIDIA-H200` in particular are unchecked against a real node.
"""

from __future__ import annotations

from typing import Any, NamedTuple

GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
GKE_LABEL = "cloud.google.com/gke-accelerator"
KARPENTER_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
AKS_ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

SCHEMES = ("gfd", "gke", "karpenter", "aks")
GPU_TYPES = ("A100-40GB", "A100-80GB", "A100-80GB-PCIE", "H100-80GB", "H200", "L40S")


class Requirement(NamedTuple):
    """A node label the pod requires: `key` equal to one of `values`.

    A NamedTuple, not a dataclass: `launcher render` imports this module, and `dataclasses` (with `inspect`)
    would cost each start ~8 ms."""

    key: str
    values: tuple[str, ...]


def _r(key: str, *values: str) -> Requirement:
    return Requirement(key, tuple(values))


_AKS_GPU = _r(AKS_ACCELERATOR_LABEL, "nvidia")

# scheme -> gpu_type -> the labels a node of that type carries. A type missing from a scheme is a GPU
# that platform does not offer (validation names the types it does).
TABLE: dict[str, dict[str, tuple[Requirement, ...]]] = {
    "gfd": {
        "A100-40GB": (_r(GFD_PRODUCT_LABEL, "NVIDIA-A100-SXM4-40GB"),),
        "A100-80GB": (_r(GFD_PRODUCT_LABEL, "NVIDIA-A100-SXM4-80GB"),),
        "A100-80GB-PCIE": (_r(GFD_PRODUCT_LABEL, "NVIDIA-A100-80GB-PCIe"),),
        "H100-80GB": (_r(GFD_PRODUCT_LABEL, "NVIDIA-H100-80GB-HBM3"),),
        "H200": (_r(GFD_PRODUCT_LABEL, "NVIDIA-H200"),),
        "L40S": (_r(GFD_PRODUCT_LABEL, "NVIDIA-L40S"),),
    },
    "gke": {
        "A100-40GB": (_r(GKE_LABEL, "nvidia-tesla-a100"),),
        "A100-80GB": (_r(GKE_LABEL, "nvidia-a100-80gb"),),
        # the same H100 SXM on A3 High/Edge and on A3 Mega machines: one of two values
        "H100-80GB": (_r(GKE_LABEL, "nvidia-h100-80gb", "nvidia-h100-mega-80gb"),),
        "H200": (_r(GKE_LABEL, "nvidia-h200-141gb"),),
    },
    "karpenter": {
        # both A100s are named `a100`: the GPU memory (MiB) tells them apart
        "A100-40GB": (_r(KARPENTER_NAME_LABEL, "a100"), _r(KARPENTER_MEMORY_LABEL, "40960")),
        "A100-80GB": (_r(KARPENTER_NAME_LABEL, "a100"), _r(KARPENTER_MEMORY_LABEL, "81920")),
        "H100-80GB": (_r(KARPENTER_NAME_LABEL, "h100"),),
        "H200": (_r(KARPENTER_NAME_LABEL, "h200"),),
        "L40S": (_r(KARPENTER_NAME_LABEL, "l40s"),),
    },
    "aks": {
        # AKS labels a GPU pool only `accelerator: nvidia`: the VM size names the GPU
        "A100-40GB": (_AKS_GPU, _r(INSTANCE_TYPE_LABEL, "Standard_ND96asr_v4")),
        "A100-80GB": (_AKS_GPU, _r(INSTANCE_TYPE_LABEL, "Standard_ND96amsr_A100_v4")),
        "A100-80GB-PCIE": (_AKS_GPU, _r(INSTANCE_TYPE_LABEL, "Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4",
                                        "Standard_NC96ads_A100_v4")),
        "H100-80GB": (_AKS_GPU, _r(INSTANCE_TYPE_LABEL, "Standard_ND96isr_H100_v5")),
        "H200": (_AKS_GPU, _r(INSTANCE_TYPE_LABEL, "Standard_ND96isr_H200_v5")),
    },
}


def requirements(scheme: str, gpu_type: str | None, product_label: str = GFD_PRODUCT_LABEL) -> tuple[Requirement, ...]:
    """The node labels a pod for `gpu_type` requires on `scheme`; () for `gpu_type` None (any GPU node).

    `product_label` replaces the gfd key (resources.gpu_product_label, for clusters that relabel it).
    Raises KeyError for a type the scheme does not offer (the spec's rules refuse it first).
    """
    if gpu_type is None:
        return ()
    reqs = TABLE[scheme][gpu_type]
    if scheme == "gfd" and product_label != GFD_PRODUCT_LABEL:
        reqs = tuple(Requirement(product_label, r.values) if r.key == GFD_PRODUCT_LABEL else r for r in reqs)
    return reqs


def split(reqs: tuple[Requirement, ...]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Requirements as (nodeSelector entries, nodeAffinity matchExpressions): one value vs several."""
    selector = {r.key: r.values[0] for r in reqs if len(r.values) == 1}
    expressions = [{"key": r.key, "operator": "In", "values": list(r.values)} for r in reqs if len(r.values) > 1]
    return selector, expressions


def describe(reqs: tuple[Requirement, ...]) -> str:
    """`k=v,k2 in (a|b)`: how the pre-flight and status name a requirement."""
    return ",".join(f"{r.key}={r.values[0]}" if len(r.values) == 1 else f"{r.key} in ({'|'.join(r.values)})"
                    for r in reqs)


def matches(labels: dict, reqs: tuple[Requirement, ...] | list[Requirement]) -> bool:
    """Does a node with these labels satisfy every requirement."""
    return all(labels.get(r.key) in r.values for r in reqs)


def keys(scheme: str) -> list[str]:
    """Every label key the scheme's table uses (what status shows of a non-matching GPU node)."""
    seen: dict[str, None] = {}
    for reqs in TABLE[scheme].values():
        for r in reqs:
            seen.setdefault(r.key, None)
    return list(seen)


def identify(scheme: str, labels: dict, product_label: str = GFD_PRODUCT_LABEL) -> list[str]:
    """The GPU types whose labels a node carries on this scheme (to suggest a gpu_type that fits)."""
    return [t for t in TABLE[scheme] if matches(labels, requirements(scheme, t, product_label))]


def markdown_table() -> str:
    """The table as the README shows it (tests/spec/test_gpu_select.py keeps the README's copy equal)."""
    head = "| gpu_type | " + " | ".join(f"`{s}`" for s in SCHEMES) + " |"
    rows = [head, "|---" * (len(SCHEMES) + 1) + "|"]
    for t in GPU_TYPES:
        cells = []
        for s in SCHEMES:
            reqs = TABLE[s].get(t)
            cells.append("not offered" if reqs is None else "<br>".join(
                f"`{r.key}={r.values[0]}`" if len(r.values) == 1
                else f"`{r.key}` in " + ", ".join(f"`{v}`" for v in r.values) + " (nodeAffinity)" for r in reqs))
        rows.append(f"| `{t}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------------
# Why no node fits: the pre-flight's and status's message, from requirements or from a live pod.


def _gpus(node: dict, gpu_resource: str) -> str:
    return str(((node.get("status") or {}).get("allocatable") or {}).get(gpu_resource) or "0")


def _has_gpu(node: dict, gpu_resource: str) -> bool:
    try:
        return float(_gpus(node, gpu_resource).rstrip("k")) > 0
    except ValueError:
        return False


def node_summary(node: dict, show_keys: list[str], gpu_resource: str) -> str:
    """`n1 (key=value, ..., 8 nvidia.com/gpu)`: a GPU node by the labels that matter here."""
    md = node.get("metadata") or {}
    labels = md.get("labels") or {}
    shown = [f"{k}={labels[k]}" for k in show_keys if k in labels] or ([f"{show_keys[0]}=<unset>"] if show_keys else [])
    return f"{md.get('name', '?')} ({', '.join([*shown, f'{_gpus(node, gpu_resource)} {gpu_resource}'])})"


def unmatched(reqs, nodes: list[dict], gpu_resource: str, show_keys: list[str] | None = None) -> str | None:
    """`no node matches SEL; nodes with GPU: n1 (...)`, or None when a node has every required label."""
    reqs = tuple(reqs)
    if not reqs or any(matches((n.get("metadata") or {}).get("labels") or {}, reqs) for n in nodes):
        return None
    keys_shown = show_keys if show_keys is not None else list(dict.fromkeys(r.key for r in reqs))
    gpu_nodes = [n for n in nodes if _has_gpu(n, gpu_resource)]
    text = f"no node matches {describe(reqs)}"
    if not gpu_nodes:
        return text + f"; no node has {gpu_resource} allocatable"
    more = f" and {len(gpu_nodes) - 8} more" if len(gpu_nodes) > 8 else ""
    return text + f"; nodes with {gpu_resource}: " + ", ".join(
        node_summary(n, keys_shown, gpu_resource) for n in gpu_nodes[:8]) + more


def pod_requirements(pod: dict) -> tuple[Requirement, ...]:
    """A live pod's nodeSelector and its required nodeAffinity `In` expressions (one term), as requirements."""
    spec = pod.get("spec") or {}
    reqs = [Requirement(k, (v,)) for k, v in (spec.get("nodeSelector") or {}).items()]
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    if len(terms) == 1:  # several terms are ORed: not one requirement list
        reqs += [Requirement(e["key"], tuple(e.get("values") or ())) for e in terms[0].get("matchExpressions") or []
                 if e.get("operator") == "In" and e.get("key")]
    return tuple(reqs)


def pod_gpu_resource(pod: dict, default: str = "nvidia.com/gpu") -> str | None:
    """The GPU-like extended resource a pod's containers ask for (None: a pod without one)."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for name in ((c.get("resources") or {}).get("limits") or {}):
            if name == default or name.endswith("/gpu"):
                return name
    return None


def pod_placement_problem(pod: dict, nodes: list[dict]) -> str | None:
    """For a pod the scheduler cannot place: which of its required labels no node has, and the GPU nodes there are."""
    gpu = pod_gpu_resource(pod)
    return unmatched(pod_requirements(pod), nodes, gpu or "nvidia.com/gpu") if gpu else \
        unmatched(pod_requirements(pod), nodes, "cpu")


# GPU types a user names, mapped to the value of the NVIDIA GPU feature-discovery label
# `nvidia.com/gpu.product` (gpu_label_scheme gfd). Every scheme's labels: launcher.spec.gpu.TABLE.
GPU_PRODUCTS: dict[str, str] = {t: reqs[0].values[0] for t, reqs in TABLE["gfd"].items()}
