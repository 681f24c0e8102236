"""The cross-field rules (`check_rules`): verl's batch arithmetic, Kubernetes name budgets, tracking, env.

Run on a validated `ExperimentSpec` (`launcher.spec.load.spec_from_raw`); each failure is a `Problem`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.spec.names import (
    HASH_LEN,
    JOB_NAME_MAX,
    NAME_MAX,
    RESERVED_ENV,
    RESERVED_ENV_PREFIX,
    TRAINJOB_NAME_PATTERN,
    trainjob_names,
)
from launcher.spec.contract import (
    BUILTIN_MODELS,
    BUILTIN_PREFIX,
    CPU_IMAGE_EXAMPLE,
    CPU_IMAGE_TAG_SUFFIX,
    PROJECT_IMAGE_NAME,
    builtin_name,
    carries_builtin_models,
    is_cpu_image,
)
from launcher.spec.gpu import GPU_PRODUCTS
from launcher.spec.gpu import TABLE as GPU_TABLE
from launcher.spec.problems import REWARD_PATH_EXPECTED, Problem, _Redacted

if TYPE_CHECKING:
    from launcher.spec.model import ExperimentSpec


# A stuck attempt is ended by deleting its pods: the training-operator recreates a PyTorchJob's and the entrypoint
# resumes from the newest checkpoint (tests/e2e/test_real_faults_training_e2e.py). A RayJob's Ray job does not survive
# its head pod, and a TrainJob's JobSet has not been tried: `delete` and `launcher relaunch` serve those.
STALL_RESTART_EXPECTED = ("report or delete for backends rayjob and trainjob (restart deletes the stuck attempt's pods, "
                          "which only a PyTorchJob's operator recreates to resume; use delete, then `launcher "
                          "relaunch`)")
STALL_RESTART_BACKOFF = ("at least 1 with health.stall.action restart (the replicas' restart policy is then "
                         "OnFailure; with Never the training-operator fails the job when its pod is deleted)")


def check_rules(spec: ExperimentSpec) -> list[Problem]:
    """Cross-field rules: verl's batch arithmetic and Kubernetes naming.

    The batch rules mirror verl 0.9.1 (`verl/utils/config.py::validate_config`, and the checks its v1
    trainer and workers make only at run time: `verl/workers/engine_workers.py::train_mini_batch` and
    `verl/workers/engine/utils.py::prepare_micro_batches`), so a config that passes here is not
    rejected by verl for its batch shape (tests/verl/test_verl_agreement.py proves it on a table).
    """
    problems: list[Problem] = []
    res, data, actor, rollout = spec.resources, spec.data, spec.actor, spec.rollout
    # A CPU-only pod counts as one worker: CPU training runs one trainer process per pod
    # (trainer.n_gpus_per_node=1), and the smoke workload validates with that substitution.
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
    if spec.cpu_training:
        problems += _cpu_training_problems(spec)
    problems += _model_problems(spec)
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
    if (tp > per_node or per_node % tp) and not spec.cpu_training:  # CPU training: _cpu_training_problems says why
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
    problems += _verl_override_problems(spec)
    problems += _reward_problems(spec)
    if data.dataset == "parquet" and data.source_dir is not None:
        problems.append(Problem("data.source_dir", "null with data.dataset parquet (source_dir is raw GSM8K to "
                                "convert; your parquet files are used as they are)", data.source_dir))
    problems += _env_problems(spec)
    if spec.health.stall.action == "restart" and spec.backend != "pytorchjob":
        problems.append(Problem("health.stall.action", STALL_RESTART_EXPECTED, "restart"))
    elif spec.health.stall.action == "restart" and spec.run_policy.backoff_limit < 1:
        problems.append(Problem("run_policy.backoff_limit", STALL_RESTART_BACKOFF, spec.run_policy.backoff_limit))
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


def _cpu_training_problems(spec: ExperimentSpec) -> list[Problem]:
    """Workload grpo on CPU-only pods: verl's real trainer with vLLM's CPU build and the project's verl CPU platform
    (docker/verl-cpu/README.md), which only an image carrying that platform has, and the settings verl cannot run
    on CPU."""
    problems: list[Problem] = []
    if not is_cpu_image(spec.image):
        problems.append(Problem(
            "resources.gpus_per_node",
            f"at least 1 for workload grpo with image {spec.image} (0, CPU-only pods, needs an image carrying "
            f"the verl CPU platform, whose tag ends in {CPU_IMAGE_TAG_SUFFIX}, e.g. {CPU_IMAGE_EXAMPLE}; "
            "or workload smoke)",
            spec.resources.gpus_per_node))
    if spec.actor.strategy != "fsdp2":
        problems.append(Problem(
            "actor.strategy",
            "fsdp2 on CPU-only pods (resources.gpus_per_node 0: verl's FSDP1 refuses CPU parameters)",
            spec.actor.strategy))
    if spec.actor.use_remove_padding:
        problems.append(Problem(
            "actor.use_remove_padding",
            "false on CPU-only pods (resources.gpus_per_node 0: removing padding needs flash-attn's GPU kernels)",
            spec.actor.use_remove_padding))
    if spec.rollout.name != "vllm":
        problems.append(Problem(
            "rollout.name",
            "vllm on CPU-only pods (resources.gpus_per_node 0: the image carries vLLM's CPU build)",
            spec.rollout.name))
    if spec.rollout.tensor_parallel_size != 1:
        problems.append(Problem(
            "rollout.tensor_parallel_size",
            "1 on CPU-only pods (resources.gpus_per_node 0: one vLLM CPU engine per pod)",
            spec.rollout.tensor_parallel_size))
    return problems


def _model_problems(spec: ExperimentSpec) -> list[Problem]:
    """A `builtin:` model must be one the contract knows, in an image that carries it (the project's images), without
    a local_dir."""
    name = builtin_name(spec.model.path)
    if name is None:
        return []
    known = ", ".join(f"{BUILTIN_PREFIX}{n}" for n in BUILTIN_MODELS)
    if name not in BUILTIN_MODELS:
        return [Problem("model.path", f"a known built-in model ({known}), a hub id or a path inside the pod",
                        spec.model.path)]
    problems = []
    if not carries_builtin_models(spec.image):
        problems.append(Problem(
            "model.path",
            f"a model image {spec.image} carries ({spec.model.path} is in the project's images, named "
            f"{PROJECT_IMAGE_NAME} in any registry, and in CPU images, whose tag ends in {CPU_IMAGE_TAG_SUFFIX}, "
            f"e.g. {CPU_IMAGE_EXAMPLE}), a hub id or a path inside the pod",
            spec.model.path))
    if spec.model.local_dir is not None:
        problems.append(Problem("model.local_dir", f"null with a built-in model ({spec.model.path} is already in "
                                                   "the image)", spec.model.local_dir))
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


def _verl_override_problems(spec: ExperimentSpec) -> list[Problem]:
    """`verl.overrides` may add any verl setting but not one the launcher sets (spec.verl.override_conflicts)."""
    from launcher.spec.verl import override_conflicts

    return [Problem(f"verl.overrides.{i}", f"a verl key the launcher does not set itself ({instead})",
                    spec.verl.overrides[i]) for i, instead in override_conflicts(spec)]


def _reward_problems(spec: ExperimentSpec) -> list[Problem]:
    """A reward function from a local file: its content is there, small enough, Python, and defines `name`.
    Checked by reading the source (ast), never by importing it: the file is the user's code, run only in the pod."""
    from launcher.spec.model import MAX_REWARD_SOURCE_BYTES

    fn = spec.reward.function
    if fn is None:
        return []
    if not fn.local:
        if "/" in fn.path[len("pkg://"):] or fn.path.endswith(".py"):  # the pattern's file branch: not a module
            return [Problem("reward.function.path", REWARD_PATH_EXPECTED, fn.path)]
        if fn.source is not None:
            return [Problem("reward.function.source", "nothing: a pkg:// module comes from the image (source is the "
                            "content of a local reward.function.path)", _Redacted(f"{len(fn.source)} characters"))]
        return []
    if fn.source is None:
        return [Problem("reward.function.source", f"the content of {fn.path} (the launcher reads the file "
                        f"reward.function.path names; with Helm: --set-file reward.function.source={fn.path})", None)]
    size = len(fn.source.encode("utf-8"))
    if size > MAX_REWARD_SOURCE_BYTES:
        return [Problem("reward.function.source", f"at most {MAX_REWARD_SOURCE_BYTES} bytes (it travels in the run's "
                        "ConfigMap; put larger code in the image and name it pkg://<module>)",
                        _Redacted(f"{size} bytes"))]
    import ast

    try:
        tree = ast.parse(fn.source, filename=fn.path)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes
        where = f"line {exc.lineno}: " if getattr(exc, "lineno", None) else ""
        return [Problem("reward.function.source", f"valid Python in {fn.path}",
                        _Redacted(f"{where}{getattr(exc, 'msg', None) or exc}"))]
    defined = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined += [(a.asname or a.name).split(".")[0] for a in node.names]
    if fn.name not in defined:
        names = ", ".join(n for n in dict.fromkeys(defined) if not n.startswith("_")) or "no public names"
        return [Problem("reward.function.name", f"a function defined at the top level of {fn.path}",
                        _Redacted(f"{fn.name!r}, which it does not define (it defines: {names})"))]
    return []


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
