"""Names, labels and selectors: the one owner of both (the chart's `_helpers.tpl` mirrors this).

The launcher finds its objects by these labels, never by reassembling names, and only ever
touches objects that carry `app.kubernetes.io/managed-by: grpo-launcher` (or Helm, for chart
installs) together with `app.kubernetes.io/part-of: grpo-launcher`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher import __version__

if TYPE_CHECKING:  # `list`, `status`, `delete` need only the constants: they must not build the spec's models
    from launcher.spec import ExperimentSpec

APP_NAME = "verl-grpo"
PART_OF = "grpo-launcher"
MANAGED_BY = "grpo-launcher"
LABEL_PREFIX = "grpo.launcher.io"
EXPERIMENT_LABEL = f"{LABEL_PREFIX}/experiment"
HASH_LABEL = f"{LABEL_PREFIX}/config-hash"
# Which pod of a run this is: "gpu" (trains), "head" (Ray head, driver only) or "submitter"
# (KubeRay's `ray job submit` pod). Anti-affinity spreads only the GPU pods.
ROLE_LABEL = f"{LABEL_PREFIX}/role"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
# Labels that Helm manages itself; the chart parity test removes only these.
HELM_BOOKKEEPING = ("helm.sh/chart", "app.kubernetes.io/managed-by")


def job_name(spec: ExperimentSpec, component: str = "trainer") -> str:
    """`<name>-<hash>` for training; `<name>-eval-<hash>` style names for other components."""
    if component == "trainer":
        return spec.job_name
    return f"{spec.name}-{component}-{spec.config_hash()}"


def eval_job_name(spec: ExperimentSpec, models: str) -> str:
    """`<name>-eval-<hash>` for an evaluation job; the hash covers the config and `models` (what is
    evaluated, e.g. "base+checkpoint=latest"), so a baseline eval and a checkpoint-25 eval are distinct runs.

    The name keeps the training job's 47-character budget (`spec.JOB_NAME_MAX`): "-eval-" is 5
    characters longer than "-", so a long experiment name is shortened rather than the job refused.
    """
    import hashlib

    from launcher.spec import HASH_LEN, JOB_NAME_MAX

    digest = hashlib.sha256(f"{spec.config_hash()}|{models}".encode()).hexdigest()[:HASH_LEN]
    prefix = spec.name[: JOB_NAME_MAX - len("-eval-") - HASH_LEN].rstrip("-")
    return f"{prefix}-eval-{digest}"


def selector_labels(instance: str) -> dict[str, str]:
    """Labels that select one run's objects and pods."""
    return {"app.kubernetes.io/name": APP_NAME, INSTANCE_LABEL: instance}


def common_labels(spec: ExperimentSpec, component: str = "trainer", instance: str | None = None) -> dict[str, str]:
    """Every object the launcher renders carries these."""
    labels = {
        **selector_labels(instance or job_name(spec, component)),
        "app.kubernetes.io/version": __version__,
        COMPONENT_LABEL: component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": PART_OF,
        EXPERIMENT_LABEL: spec.name,
        HASH_LABEL: spec.config_hash(),
    }
    if spec.scheduling.queue:
        labels[KUEUE_QUEUE_LABEL] = spec.scheduling.queue
    return labels


def pod_labels(spec: ExperimentSpec, role: str, component: str = "trainer", instance: str | None = None) -> dict:
    """Labels of a pod template: the run's labels plus its role."""
    return {**common_labels(spec, component, instance), ROLE_LABEL: role}


def instance_selector(instance: str) -> str:
    """Label selector string for one run's pods (kubectl `-l` syntax)."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(instance).items())


OWNED_SELECTOR = f"app.kubernetes.io/part-of={PART_OF}"
