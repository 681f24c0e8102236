"""Names, labels and selectors: the one owner of both (the chart's `_helpers.tpl` mirrors this).

The launcher finds its objects by these labels, never by reassembling names, and only ever
touches objects that carry `app.kubernetes.io/managed-by: grpo-launcher` (or Helm, for chart
installs) together with `app.kubernetes.io/part-of: grpo-launcher`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher import __version__

if TYPE_CHECKING:  # `list`, `status`, `delete` need only the constants: they must not build the spec's models
    from launcher.spec.model import ExperimentSpec

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

# The job name is `<name>-<hash>`; the operators then add suffixes. KubeRay refuses RayJob names
# longer than 47 characters (it derives the RayCluster and Service names from them), the
# training-operator names pods `<job>-worker-<i>`, and JobSet (Trainer v2) gives each node the
# hostname `<job>-node-0-<i>` (≤ 63) and the pod name `<job>-node-0-<i>-<5 random>`, so 47 is the
# budget on every backend.
JOB_NAME_MAX = 47
HASH_LEN = 8
NAME_MAX = JOB_NAME_MAX - HASH_LEN - 1  # 38

# Environment variables the launcher (or, for it, the operator) sets in the pods: `env:` may not
# override them. tests/spec/test_tracking_spec.py proves that every name `render` and the entrypoint set
# is listed here, so the list cannot fall behind the code.
RESERVED_ENV: frozenset[str] = frozenset({
    # render.env.pod_env
    "LAUNCHER_SPEC", "PYTHONUNBUFFERED", "HOME", "POD_NAME", "POD_NAMESPACE", "POD_IP", "NCCL_DEBUG",
    "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "HF_HOME", "RAY_COLOR_PREFIX", "RAY_DEDUP_LOGS",
    "VERL_FILE_LOGGER_PATH", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN",
    "WANDB_API_KEY", "RAY_AUTH_TOKEN",
    # tracking (render and entrypoint.tracking): use the tracking section instead
    "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "TENSORBOARD_DIR", "WANDB_PROJECT", "WANDB_ENTITY",
    "WANDB_BASE_URL", "WANDB_NAME", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR",
    # entrypoint.environment.env_for (CPU training: the verl CPU platform; LD_PRELOAD, VLLM_CPU_KVCACHE_SPACE,
    # TORCHDYNAMO_DISABLE and TQ_NUM_THREADS are not here: env_for keeps or extends what the pod already has)
    "RAY_USAGE_STATS_ENABLED", "RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES", "RAY_AUTH_MODE",
    "VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM",
    # set by the operators for the entrypoint (training-operator, KubeRay's `ray job submit`, Kubeflow
    # Trainer v2's torch plugin, which also refuses them in a TrainJob: constants.TorchRunReservedEnvNames)
    "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS",
    "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
})
# Any LAUNCHER_* name is the launcher's own (LAUNCHER_ATTEMPT, LAUNCHER_CHILD_CMD, ...).
RESERVED_ENV_PREFIX = "LAUNCHER_"

BACKENDS = ("pytorchjob", "rayjob", "trainjob")

# Kubeflow Trainer v2.2 (trainjob_types.go): a TrainJob's name is an RFC 1035 label, checked by the CRD's CEL rule.
TRAINJOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


def trainjob_names(job: str, nodes: int) -> dict[str, str]:
    """The longest names JobSet v0.11 derives from a TrainJob `job` of `nodes` nodes: the replicated Job
    (`<job>-node-0`, also a label value), the last node's hostname (`<job>-node-0-<nodes-1>`, a DNS label) and its
    headless Service (`<job>`). Each must fit in 63 characters; JOB_NAME_MAX keeps them there (tests prove it)."""
    return {"job": f"{job}-node-0", "hostname": f"{job}-node-0-{nodes - 1}", "service": job}


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


def data_pod_name(spec: ExperimentSpec) -> str:
    """`launcher data put`'s pod: one per experiment (its data outlives any one run's config hash)."""
    return f"{spec.name}-data-put"


def instance_selector(instance: str) -> str:
    """Label selector string for one run's pods (kubectl `-l` syntax)."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(instance).items())


OWNED_SELECTOR = f"app.kubernetes.io/part-of={PART_OF}"
