"""The spec's rules and constants that need no pydantic: cross-field checks, `Problem`s, name budgets.

`launcher.spec` re-exports everything here; this module exists so that a path which already holds
validated data (`launcher.fastspec`, the render/validate fast path) can run `check_rules` without
importing pydantic or building the models. It must never import pydantic (tests/test_fastspec.py
checks that `launcher render` does not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from launcher.gpu_select import TABLE as GPU_TABLE

if TYPE_CHECKING:  # the rules read attributes only: a pydantic ExperimentSpec or a fastspec view
    from launcher.spec import ExperimentSpec

# The job name is `<name>-<hash>`; the operators then add suffixes. KubeRay refuses RayJob names
# longer than 47 characters (it derives the RayCluster and Service names from them), the
# training-operator names pods `<job>-worker-<i>`, and JobSet (Trainer v2) gives each node the
# hostname `<job>-node-0-<i>` (≤ 63) and the pod name `<job>-node-0-<i>-<5 random>`, so 47 is the
# budget on every backend.
JOB_NAME_MAX = 47
HASH_LEN = 8
NAME_MAX = JOB_NAME_MAX - HASH_LEN - 1  # 38

# GPU types a user names, mapped to the value of the NVIDIA GPU feature-discovery label
# `nvidia.com/gpu.product` (gpu_label_scheme gfd). Every scheme's labels: launcher.gpu_select.TABLE.
GPU_PRODUCTS: dict[str, str] = {t: reqs[0].values[0] for t, reqs in GPU_TABLE["gfd"].items()}

# Environment variables the launcher (or, for it, the operator) sets in the pods: `env:` may not
# override them. tests/test_tracking_spec.py proves that every name `render` and the entrypoint set
# is listed here, so the list cannot fall behind the code.
RESERVED_ENV: frozenset[str] = frozenset({
    # render._env_vars
    "LAUNCHER_SPEC", "PYTHONUNBUFFERED", "HOME", "POD_NAME", "POD_NAMESPACE", "POD_IP", "NCCL_DEBUG",
    "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "HF_HOME", "RAY_COLOR_PREFIX", "RAY_DEDUP_LOGS",
    "VERL_FILE_LOGGER_PATH", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN",
    "WANDB_API_KEY", "RAY_AUTH_TOKEN",
    # tracking (render and entrypoint.tracking): use the tracking section instead
    "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "TENSORBOARD_DIR", "WANDB_PROJECT", "WANDB_ENTITY",
    "WANDB_BASE_URL", "WANDB_NAME", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR",
    # entrypoint.environment.env_for
    "RAY_USAGE_STATS_ENABLED", "RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES", "RAY_AUTH_MODE",
    # set by the operators for the entrypoint (training-operator, KubeRay's `ray job submit`, Kubeflow
    # Trainer v2's torch plugin, which also refuses them in a TrainJob: constants.TorchRunReservedEnvNames)
    "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS",
    "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
})
# Any LAUNCHER_* name is the launcher's own (LAUNCHER_ATTEMPT, LAUNCHER_CHILD_CMD, ...).
RESERVED_ENV_PREFIX = "LAUNCHER_"

BACKENDS = ("pytorchjob", "rayjob", "trainjob")
WORKLOADS = ("grpo", "smoke")


# --------------------------------------------------------------------------------------------------
# Problems and their messages


class Problem(NamedTuple):
    """One validation failure: which field, what was expected, what was given.

    A NamedTuple rather than a frozen dataclass: `dataclasses` imports `inspect` (~8 ms of a fresh
    `launcher render`, which runs these rules)."""

    field: str
    expected: str
    got: Any

    def __str__(self) -> str:
        # A field path built from a user's mapping key may hold control characters: escape them so
        # the message stays one line.
        field = self.field if self.field.isprintable() else self.field.encode("unicode_escape").decode()
        return f"{field}: expected {self.expected}, got {_show(self.got)}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def format_problems(problems: list[Problem]) -> str:
    """One line per problem, prefixed for a terminal."""
    return "\n".join(f"  - {p}" for p in problems)


class _Redacted(str):
    def __repr__(self) -> str:
        return str(self)



def check_rules(spec: ExperimentSpec) -> list[Problem]:
    """Cross-field rules: verl's batch arithmetic and Kubernetes naming.

    The batch rules mirror verl 0.9.1 (`verl/utils/config.py::validate_config`, and the checks its v1
    trainer and workers make only at run time: `verl/workers/engine_workers.py::train_mini_batch` and
    `verl/workers/engine/utils.py::prepare_micro_batches`), so a config that passes here is not
    rejected by verl for its batch shape (tests/verl/test_verl_agreement.py proves it on a table).
    """
    problems: list[Problem] = []
    res, data, actor, rollout = spec.resources, spec.data, spec.actor, spec.rollout
    # A CPU-only pod (workload smoke) counts as one worker: the arithmetic verl's validate_config
    # makes when the smoke workload substitutes trainer.n_gpus_per_node=1.
    world = res.nodes * res.workers_per_node

    if len(spec.name) > NAME_MAX:
        problems.append(
            Problem(
                "name",
                f"at most {NAME_MAX} characters (the job name adds '-<{HASH_LEN}-char config hash>' and must stay "
                f"within {JOB_NAME_MAX} so the operators' pod and service names fit in 63)",
                spec.name,
            )
        )
    if res.cpu_only and spec.workload == "grpo":
        problems.append(
            Problem(
                "resources.gpus_per_node",
                "at least 1 for workload grpo (verl's GRPO trainer with a vLLM rollout needs GPUs; "
                "0, a CPU-only pod, is allowed only with workload smoke)",
                res.gpus_per_node,
            )
        )
    offered = GPU_TABLE[res.gpu_label_scheme]
    if res.gpu_type is not None and res.gpu_type not in offered:
        unknown = res.gpu_type not in GPU_PRODUCTS
        problems.append(Problem(
            "resources.gpu_type",
            f"one of {sorted(GPU_PRODUCTS)}" if unknown else
            f"a GPU gpu_label_scheme {res.gpu_label_scheme} can select: one of {sorted(offered)}, or null for any "
            f"GPU node ({res.gpu_type} is not offered there; another scheme, or null, if your nodes have it)",
            res.gpu_type))
    if (data.train_batch_size * rollout.n) % world:
        problems.append(
            Problem(
                "data.train_batch_size",
                f"train_batch_size × rollout.n divisible by the GPU count {world} "
                f"(resources.nodes {res.nodes} × resources.gpus_per_node {res.gpus_per_node}"
                f"{', a CPU pod counts as 1' if res.cpu_only else ''}); "
                f"{data.train_batch_size} × {rollout.n} = {data.train_batch_size * rollout.n}",
                data.train_batch_size,
            )
        )
    if actor.ppo_mini_batch_size > data.train_batch_size:
        problems.append(
            Problem(
                "actor.ppo_mini_batch_size",
                f"at most data.train_batch_size ({data.train_batch_size})",
                actor.ppo_mini_batch_size,
            )
        )
    else:
        samples = actor.ppo_mini_batch_size * rollout.n
        if samples % world:
            problems.append(
                Problem(
                    "actor.ppo_mini_batch_size",
                    f"ppo_mini_batch_size × rollout.n divisible by the GPU count {world}; "
                    f"{actor.ppo_mini_batch_size} × {rollout.n} = {samples}",
                    actor.ppo_mini_batch_size,
                )
            )
        elif (samples // world) % actor.ppo_micro_batch_size_per_gpu:
            problems.append(
                Problem(
                    "actor.ppo_micro_batch_size_per_gpu",
                    f"a divisor of the per-GPU mini-batch ppo_mini_batch_size × rollout.n / GPUs = "
                    f"{actor.ppo_mini_batch_size} × {rollout.n} / {world} = {samples // world}",
                    actor.ppo_micro_batch_size_per_gpu,
                )
            )
        elif not (data.train_batch_size * rollout.n) % world:
            # verl's v1 trainer pads each step's train_batch_size × n samples up to a multiple of
            # lcm(GPUs, ppo_mini_batch_size × n), then computes log-probs (and the reference's, with a KL
            # term) per GPU in micro-batches of log_prob_micro_batch_size_per_gpu: a runtime assertion in
            # verl/workers/engine/utils.py::prepare_micro_batches that validate_config does not make.
            import math

            multiple = math.lcm(world, samples)
            per_gpu = -(-data.train_batch_size * rollout.n // multiple) * multiple // world
            if per_gpu % rollout.log_prob_micro_batch_size_per_gpu:
                problems.append(
                    Problem(
                        "rollout.log_prob_micro_batch_size_per_gpu",
                        f"a divisor of the per-GPU log-prob batch (train_batch_size × rollout.n padded to a multiple "
                        f"of lcm(GPUs, ppo_mini_batch_size × rollout.n), / GPUs) = {per_gpu}",
                        rollout.log_prob_micro_batch_size_per_gpu,
                    )
                )
    tp, per_node = rollout.tensor_parallel_size, res.workers_per_node
    if tp > per_node or per_node % tp:
        problems.append(
            Problem(
                "rollout.tensor_parallel_size",
                f"a divisor of resources.gpus_per_node ({per_node}): tensor parallelism stays within a node",
                tp,
            )
        )
    if spec.trainer.resume_mode == "resume_path" and not spec.trainer.resume_from_path:
        problems.append(Problem("trainer.resume_from_path", "a global_step_N path when resume_mode is resume_path", None))
    if spec.trainer.resume_from_path and "global_step_" not in spec.trainer.resume_from_path:
        problems.append(
            Problem("trainer.resume_from_path", "a path containing 'global_step_'", spec.trainer.resume_from_path)
        )
    problems += _tracking_problems(spec)
    problems += _env_problems(spec)
    if spec.backend == "trainjob":
        problems += _trainjob_problems(spec)
    if spec.storage.create and not spec.storage.claim_name:
        problems.append(Problem("storage.claim_name", "a claim name when storage.create is true", None))
    if res.nodes > 1 and spec.storage.claim_name and spec.storage.access_mode == "ReadWriteOnce" and spec.storage.create:
        problems.append(
            Problem(
                "storage.access_mode",
                "ReadWriteMany when several nodes share the created claim",
                spec.storage.access_mode,
            )
        )
    return problems


def _tracking_problems(spec: ExperimentSpec) -> list[Problem]:
    """The trackers verl would use must be configured where the pod can keep what they write."""
    problems: list[Problem] = []
    tr, loggers = spec.tracking, spec.loggers
    if "wandb" in loggers:
        if spec.wandb_api_key is None:
            field = "tracking.wandb.api_key" if tr.wandb.enabled else "secrets.wandb_api_key"
            problems.append(Problem(field, "a Secret reference when W&B logging is on (tracking.wandb.enabled "
                                    "or trainer.logger includes wandb)", None))
    if tr.wandb.api_key is not None and spec.secrets.wandb_api_key is not None:
        problems.append(Problem("tracking.wandb.api_key",
                                "one W&B key reference: either tracking.wandb.api_key or secrets.wandb_api_key",
                                _Redacted("both are set")))
    if "mlflow" in loggers and (not tr.mlflow.enabled or tr.mlflow.tracking_uri is None):
        problems.append(Problem("tracking.mlflow.tracking_uri",
                                "a tracking server URI with tracking.mlflow.enabled when MLflow logging is on "
                                "(verl's default, an SQLite file under /tmp in the pod, is lost with the pod)",
                                tr.mlflow.tracking_uri))
    if tr.mlflow.password is not None and tr.mlflow.username is None:
        problems.append(Problem("tracking.mlflow.username", "a Secret reference when tracking.mlflow.password is set",
                                None))
    log_dir = tr.tensorboard.log_dir
    mount = spec.storage.mount_path.rstrip("/")
    if log_dir is not None and not (log_dir == mount or log_dir.startswith(mount + "/")):
        problems.append(Problem("tracking.tensorboard.log_dir",
                                f"a directory under storage.mount_path ({spec.storage.mount_path}), so the event "
                                "files outlive the pod", log_dir))
    return problems


# Kubeflow Trainer v2.2 (trainjob_types.go): a TrainJob's name is an RFC 1035 label, checked by the CRD's CEL rule.
TRAINJOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


def trainjob_names(job: str, nodes: int) -> dict[str, str]:
    """The longest names JobSet v0.11 derives from a TrainJob `job` of `nodes` nodes: the replicated Job
    (`<job>-node-0`, also a label value), the last node's hostname (`<job>-node-0-<nodes-1>`, a DNS label) and its
    headless Service (`<job>`). Each must fit in 63 characters; JOB_NAME_MAX keeps them there (tests prove it)."""
    return {"job": f"{job}-node-0", "hostname": f"{job}-node-0-{nodes - 1}", "service": job}


def _trainjob_problems(spec: ExperimentSpec) -> list[Problem]:
    """What Kubeflow Trainer v2.2 and JobSet refuse, or cannot express, for backend trainjob."""
    import re

    problems = []
    if not re.match(TRAINJOB_NAME_PATTERN, spec.job_name):
        problems.append(Problem("name", "a name starting with a letter for backend trainjob (a TrainJob's name is an "
                                        "RFC 1035 label: the CRD refuses one starting with a digit)", spec.name))
    for what, name in trainjob_names(spec.job_name, spec.resources.nodes).items():
        if len(name) > 63:
            problems.append(Problem("name", f"a shorter name: the JobSet's {what} name {name} would exceed 63 "
                                            "characters", spec.name))
    if spec.run_policy.clean_pod_policy != "None":
        problems.append(Problem("run_policy.clean_pod_policy",
                                "None for backend trainjob (JobSet has no clean-pod policy: the pods stay until the "
                                "TrainJob is deleted or run_policy.ttl_seconds_after_finished removes the JobSet)",
                                spec.run_policy.clean_pod_policy))
    return problems


def _env_problems(spec: ExperimentSpec) -> list[Problem]:
    """`env:` items: one source each, unique names, none the launcher sets."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, var in enumerate(spec.env):
        where = f"env[{i}]"
        if var.name in RESERVED_ENV or var.name.startswith(RESERVED_ENV_PREFIX):
            problems.append(Problem(f"{where}.name",
                                    "a variable the launcher does not set itself (it owns "
                                    f"{RESERVED_ENV_PREFIX}* and spec.RESERVED_ENV; tracking URIs, W&B and MLflow "
                                    "settings go in the tracking section)", var.name))
        if var.name in seen:
            problems.append(Problem(f"{where}.name", "a name not already listed in env", var.name))
        seen.add(var.name)
        sources = [s for s in ("value", "secret_key_ref", "config_map_key_ref") if getattr(var, s) is not None]
        if len(sources) != 1:
            problems.append(Problem(where, "exactly one of value, secret_key_ref, config_map_key_ref",
                                    ", ".join(sources) or "none"))
    return problems
