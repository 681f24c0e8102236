"""Where a run's pods ran: `runs/<job>/pods.json`, one entry per pod, and whether its node is a KWOK fake.

Why it is recorded: on the embedded cluster of `make run` the nodes are KWOK fakes. They run no
container; the trainer pod's log is a generated verl GRPO log (`hack/simlog.py`) that KWOK serves
through the pod-logs API. Metrics parsed from it look like a real run's, so the report must be able
to say they are simulated, and it reads only the run directory (it never talks to the cluster).
The follower records each pod's node here when the pod starts (`launcher.run.follow`); `report` reads it
back.

A node is a KWOK fake when it carries the annotation `kwok.x-k8s.io/node: fake` (the selector of the
nodes kwok-controller manages: hack/cluster/up.sh passes it, hack/cluster/manifests/nodes.yaml sets
it) or the label `type: kwok` (KWOK's examples and the same manifests). A node that cannot be read (the launcher
may lack `get nodes`, a cluster-scoped permission) is recorded as unknown (`simulated: null`),
never guessed.

File format (JSON): `{"pods": {"<pod>": {"node": "<node>", "simulated": true | false | null}}}`; a pod created
again on another node under the same name (its node was lost) adds `"moved_from": ["<earlier node>", ...]`, and
its `simulated` then covers every node it ran on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PODS_FILE = "pods.json"
# (key, value) of the annotation and of the label that mark a KWOK node
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KWOK_LABEL = ("type", "kwok")

# The words the report leads with (the wording, so users and tests find the same phrase).
SIMULATED_HEADLINE = "simulated trainer (KWOK fake nodes; generated verl log)"
REAL_HEADLINE = "real training"
# A run on real nodes of the project's built-in tiny model on CPU pods: real in every mechanism, tiny in scale.
REAL_CPU_HEADLINE = "real training (tiny model on CPU)"


def is_kwok_node(node: dict) -> bool:
    """True when `node` (a Node object as a dict) is simulated by KWOK (see the module docstring)."""
    md = node.get("metadata") or {}
    annotations = md.get("annotations") or {}
    labels = md.get("labels") or {}
    return annotations.get(KWOK_ANNOTATION[0]) == KWOK_ANNOTATION[1] or labels.get(KWOK_LABEL[0]) == KWOK_LABEL[1]


def either(a: bool | None, b: bool | None) -> bool | None:
    """Whether a pod that ran on two nodes was simulated: True when either node was a KWOK fake, None when either
    is unknown, else False."""
    return True if True in (a, b) else None if None in (a, b) else False


def load(run_dir: Path) -> dict[str, dict[str, Any]] | None:
    """`pods.json`'s pods, or None when the run directory has none (or it is unreadable)."""
    try:
        data = json.loads((Path(run_dir) / PODS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pods = data.get("pods") if isinstance(data, dict) else None
    return {str(k): v for k, v in pods.items() if isinstance(v, dict)} if isinstance(pods, dict) else None


def tiny_cpu(spec: dict | None) -> bool:
    """True for a spec (as saved in the run directory) that trains a built-in model (`builtin:`) on CPU-only pods."""
    spec = spec or {}
    model, res = spec.get("model") or {}, spec.get("resources") or {}
    return str(model.get("path", "")).startswith("builtin:") and res.get("gpus_per_node") == 0


def headline(simulated: bool | None, *, tiny_cpu: bool = False) -> str | None:
    """What a run is, in the words the report and the console lead with: simulated, real training (tiny model on
    CPU when `tiny_cpu`: a built-in model on CPU-only pods), or None when the nodes are unknown."""
    if simulated is None:
        return None
    return SIMULATED_HEADLINE if simulated else REAL_CPU_HEADLINE if tiny_cpu else REAL_HEADLINE


def summary(pods: dict[str, dict[str, Any]] | None, *, tiny_cpu: bool = False) -> dict[str, Any]:
    """The report's `execution` block: `simulated` is True when any pod ran on a KWOK node, False when
    every recorded pod ran on a real node, None when nothing (or only unknown nodes) was recorded;
    `headline` (`headline()`) says which; `note` says which pods ran where."""
    pods = pods or {}
    fake = sorted(p for p, v in pods.items() if v.get("simulated") is True)
    real = sorted(p for p, v in pods.items() if v.get("simulated") is False)
    unknown = sorted(p for p, v in pods.items() if v.get("simulated") not in (True, False))
    simulated = True if fake else False if real and not unknown else None
    note = None
    if fake:
        nodes = sorted({str(pods[p].get("node")) for p in fake})
        note = (
            f"pod(s) {', '.join(fake)} ran on KWOK fake "
            f"node(s) {', '.join(nodes)}, which run no container. The log these figures were parsed from is a "
            "generated verl GRPO log (`hack/simlog.py`, served by KWOK through the pod-logs API), not training: "
            "the API server, scheduler, operators and the launcher's submit/follow/metrics/report are real, the "
            "numbers are not."
        )
        if real:
            note += f" Pod(s) {', '.join(real)} ran on real nodes."
    elif unknown:
        note = f"node kind unknown for pod(s) {', '.join(unknown)} (the node could not be read)"
    return {"simulated": simulated, "headline": headline(simulated, tiny_cpu=tiny_cpu), "note": note, "pods": pods}
