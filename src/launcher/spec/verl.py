"""Spec → verl 0.9.1 Hydra override list.

The one function both sides use: the launcher (to show and hash what will run) and the in-pod
entrypoint (to run it), so what `render` shows is what the pod executes. The list is argv-ready
(`python3 -m verl.trainer.main_ppo *overrides`): no shell quoting, Hydra quoting where needed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from launcher.spec.contract import REWARD_FILE_PATH, builtin_model

if TYPE_CHECKING:
    from launcher.spec.model import ExperimentSpec

# Hydra's override grammar treats these characters specially in unquoted values; anything outside
# this conservative set is single-quoted.
_HYDRA_SAFE = re.compile(r"^[A-Za-z0-9_./@+-]+$")
_HYDRA_RESERVED = {"null", "true", "false", "nan", "inf", "-inf"}

Mode = Literal["train", "eval"]

# CPU training (docker/verl-cpu/README.md §2): Ray's logical CPU count when verl starts its own Ray. TransferQueue's
# storage actors could not be placed with fewer (verl asks for CPUs per actor, not what the pod has), so a
# 2-core pod declares 16 logical CPUs; the pod's real limit still bounds what runs.
CPU_RAY_MIN_CPUS = 16
# verl's FSDP engine takes its parameter dtype from mixed_precision (default bf16, under bf16 autocast), not from
# fsdp_config.dtype: fp32 makes vLLM's log-probs equal the actor's. One argv item, no shell quoting.
CPU_MIXED_PRECISION = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"


def hydra_value(value: object) -> str:
    """Format a Python value as a Hydra override value (bool, number, None, string or list)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "True", False: "False"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _HYDRA_SAFE.match(text) and text.lower() not in _HYDRA_RESERVED and not _looks_numeric(text):
        return text
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def model_path(spec: ExperimentSpec) -> str:
    """The path verl loads: a built-in model's directory in the image (`builtin:<name>`, launcher.spec.contract),
    else the pre-staged local directory when there is one, else the hub id/path."""
    builtin = builtin_model(spec.model.path)
    if builtin is not None:
        return builtin.path
    return spec.model.local_dir or spec.model.path


def verl_overrides(
    spec: ExperimentSpec,
    *,
    mode: Mode = "train",
    model: str | None = None,
    experiment_name: str | None = None,
    checkpoint_dir: str | None = None,
    ray_num_cpus: int | None = None,
) -> list[str]:
    """Build verl's override list for `spec`.

    mode="eval" runs validation only (`trainer.val_only=True trainer.val_before_train=True`, greedy
    decoding, verl's defaults for `val_kwargs`) on `data.val_files`, for `model` (a merged
    checkpoint or the base model). `ray_num_cpus` pins Ray's CPU count to the container's limit
    (single-node pods only; verl passes it to `ray.init`, which refuses it when joining a cluster).

    `trainer.resume_mode` reaches verl as the spec says it, the same on every attempt: verl's trackers log the
    whole config as parameters once per start, and MLflow refuses a run whose parameters change, so a resumed
    attempt could not log to its run otherwise. With `auto` the entrypoint first makes verl's tracker file name
    its own decision (`entrypoint.resume.align_tracker`: the newest complete checkpoint, none for a fresh start),
    since verl's `auto` trusts the tracker without checking that every rank's shard is there.

    CPU training (`spec.cpu_training`: workload grpo on CPU-only pods) adds, each beside the keys it belongs with,
    what verl 0.9.1 needs on CPU with the image's verl CPU platform (docker/verl-cpu/README.md §2): sdpa attention
    (no flash-attn), FSDP2 in fp32, vLLM in fp32 and eager without sleep mode, one agent-loop and one reward
    worker, one TransferQueue storage unit, `trainer.device=cpu` and one trainer process per pod
    (`trainer.n_gpus_per_node=1`). Where verl starts its own Ray (`spec.verl_starts_ray`) it also declares one
    logical GPU and at least CPU_RAY_MIN_CPUS CPUs, and starts no dashboard; multi-node raylets get the same from `ray start`
    (entrypoint.ray_cluster), a RayJob's from KubeRay's rayStartParams. Every other item, and the order, is the
    GPU list's.
    """
    a, d, r, act, t, res = spec.algorithm, spec.data, spec.rollout, spec.actor, spec.trainer, spec.resources
    cpu = spec.cpu_training
    own_ray = cpu and spec.verl_starts_ray
    fn = spec.reward.function
    pairs: list[tuple[str, object]] = [
        ("algorithm.adv_estimator", a.adv_estimator),
        ("algorithm.norm_adv_by_std_in_grpo", a.norm_adv_by_std_in_grpo),
        ("algorithm.use_kl_in_reward", a.use_kl_in_reward),
        ("algorithm.kl_ctrl.kl_coef", a.kl_coef),
        ("data.train_files", d.train_path),
        ("data.val_files", d.val_path),
        ("data.train_batch_size", d.train_batch_size),
        ("data.max_prompt_length", d.max_prompt_length),
        ("data.max_response_length", d.max_response_length),
        ("data.filter_overlong_prompts", d.filter_overlong_prompts),
        ("data.truncation", d.truncation),
        ("actor_rollout_ref.model.path", model or model_path(spec)),
        ("actor_rollout_ref.model.trust_remote_code", spec.model.trust_remote_code),
        ("actor_rollout_ref.model.use_remove_padding", act.use_remove_padding),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", act.gradient_checkpointing),
        *([("+actor_rollout_ref.model.override_config.attn_implementation", "sdpa")] if cpu else []),
        ("actor_rollout_ref.actor.strategy", act.strategy),
        *([("actor_rollout_ref.actor.fsdp_config.strategy", "fsdp2"),
           ("+actor_rollout_ref.actor.fsdp_config.mixed_precision", _Raw(CPU_MIXED_PRECISION))] if cpu else []),
        ("actor_rollout_ref.actor.optim.lr", act.lr),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", act.ppo_mini_batch_size),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", act.ppo_micro_batch_size_per_gpu),
        ("actor_rollout_ref.actor.use_kl_loss", a.use_kl_loss),
        ("actor_rollout_ref.actor.kl_loss_coef", a.kl_loss_coef),
        ("actor_rollout_ref.actor.kl_loss_type", a.kl_loss_type),
        ("actor_rollout_ref.actor.entropy_coeff", a.entropy_coeff),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", act.param_offload),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", act.optimizer_offload),
        ("actor_rollout_ref.rollout.name", r.name),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", r.tensor_parallel_size),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", r.gpu_memory_utilization),
        ("actor_rollout_ref.rollout.n", r.n),
        ("actor_rollout_ref.rollout.temperature", r.temperature),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", r.log_prob_micro_batch_size_per_gpu),
        *([("actor_rollout_ref.rollout.dtype", "float32"),
           ("actor_rollout_ref.rollout.enforce_eager", True),
           ("actor_rollout_ref.rollout.free_cache_engine", False),
           ("+actor_rollout_ref.rollout.enable_sleep_mode", False),
           ("actor_rollout_ref.rollout.agent.num_workers", 1)] if cpu else []),
        # Inert without a KL term (verl creates no reference worker), required with one.
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", r.log_prob_micro_batch_size_per_gpu),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", act.param_offload),
        *([("reward.num_workers", 1)] if cpu else []),
        *([("reward.custom_reward_function.path", REWARD_FILE_PATH if fn.local else fn.path),
           ("reward.custom_reward_function.name", fn.name)] if fn else []),
        *([("transfer_queue.backend.SimpleStorage.num_data_storage_units", 1),
           # TransferQueue pins each storage unit (1 CPU) to a Ray node by sorted node id, hard affinity: on a RayJob
           # that could be the head, whose one logical CPU verl's TaskRunner holds, and the unit then waits forever
           # with no resource demand. Only nodes with a (logical) GPU, the workers, may hold it.
           ("+transfer_queue.backend.SimpleStorage.required_node_resource", "GPU")] if cpu else []),
        *([("+ray_kwargs.ray_init.num_gpus", 1),
           # Nothing reads a CPU run's dashboard (the multi-node head starts Ray without one too), and its nine head
           # processes took ~3 s of ray.init's CPU-bound start (bench/RESULTS.md, "where a real run's first step goes").
           ("+ray_kwargs.ray_init.include_dashboard", False)] if own_ray else []),
        *([("trainer.device", "cpu")] if cpu else []),
        ("trainer.critic_warmup", 0),
        ("trainer.logger", spec.loggers),
        ("trainer.project_name", t.project_name),
        ("trainer.experiment_name", experiment_name or spec.name),
        ("trainer.n_gpus_per_node", spec.ray_gpus_per_node),
        ("trainer.nnodes", res.nodes),
        ("trainer.total_epochs", t.total_epochs),
        ("trainer.total_training_steps", t.total_training_steps),
        ("trainer.default_local_dir", checkpoint_dir or spec.checkpoint_path),
    ]
    if d.val_max_samples is not None:
        pairs.append(("data.val_max_samples", d.val_max_samples))
    if t.max_actor_ckpt_to_keep is not None:
        pairs.append(("trainer.max_actor_ckpt_to_keep", t.max_actor_ckpt_to_keep))
    if mode == "eval":
        pairs += [
            ("trainer.val_only", True),
            ("trainer.val_before_train", True),
            ("trainer.test_freq", -1),
            ("trainer.save_freq", -1),
            ("trainer.resume_mode", "disable"),
        ]
    else:
        pairs += [
            ("trainer.val_before_train", t.val_before_train),
            ("trainer.test_freq", t.test_freq),
            ("trainer.save_freq", t.effective_save_freq),
        ]
        pairs.append(("trainer.resume_mode", t.resume_mode))
        if t.resume_mode == "resume_path":
            pairs.append(("trainer.resume_from_path", t.resume_from_path))
    if own_ray:
        # CPU training: the pod's CPU limit (when the entrypoint gives it), but at least CPU_RAY_MIN_CPUS logical
        # CPUs, or TransferQueue's actors cannot be placed.
        ray_num_cpus = max(ray_num_cpus or 0, CPU_RAY_MIN_CPUS)
    if ray_num_cpus is not None:
        pairs.append(("ray_kwargs.ray_init.num_cpus", ray_num_cpus))
    own = [f"{key}={value if isinstance(value, _Raw) else hydra_value(value)}" for key, value in pairs]
    return own + list(spec.verl.overrides)  # the user's last, so verl applies them over the launcher's (Hydra: last wins)


class _Raw(str):
    """A Hydra value written as it is (a dict literal such as CPU_MIXED_PRECISION), not quoted as a string."""


# --------------------------------------------------------------------------------------------------
# The user's own overrides (`verl.overrides`): what they may not set

# verl keys the launcher's list sets from a typed field: an override of one is refused naming the field, so a
# value has one place to live (and `diff`, the hash and the report see it where a reader looks).
TYPED_KEYS: dict[str, str] = {
    "algorithm.adv_estimator": "algorithm.adv_estimator",
    "algorithm.norm_adv_by_std_in_grpo": "algorithm.norm_adv_by_std_in_grpo",
    "algorithm.use_kl_in_reward": "algorithm.use_kl_in_reward",
    "algorithm.kl_ctrl.kl_coef": "algorithm.kl_coef",
    "data.train_files": "data.train_files",
    "data.val_files": "data.val_files",
    "data.train_batch_size": "data.train_batch_size",
    "data.max_prompt_length": "data.max_prompt_length",
    "data.max_response_length": "data.max_response_length",
    "data.filter_overlong_prompts": "data.filter_overlong_prompts",
    "data.truncation": "data.truncation",
    "data.val_max_samples": "data.val_max_samples",
    "actor_rollout_ref.model.path": "model.path",
    "actor_rollout_ref.model.trust_remote_code": "model.trust_remote_code",
    "actor_rollout_ref.model.use_remove_padding": "actor.use_remove_padding",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "actor.gradient_checkpointing",
    "actor_rollout_ref.actor.strategy": "actor.strategy",
    "actor_rollout_ref.actor.optim.lr": "actor.lr",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.use_kl_loss": "algorithm.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef": "algorithm.kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type": "algorithm.kl_loss_type",
    "actor_rollout_ref.actor.entropy_coeff": "algorithm.entropy_coeff",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "actor.param_offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "actor.optimizer_offload",
    "actor_rollout_ref.rollout.name": "rollout.name",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rollout.tensor_parallel_size",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.n": "rollout.n",
    "actor_rollout_ref.rollout.temperature": "rollout.temperature",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.fsdp_config.param_offload": "actor.param_offload",
    "reward.custom_reward_function": "reward.function",
    "trainer.project_name": "trainer.project_name",
    "trainer.logger": "trainer.logger (and tracking.*)",
    "trainer.nnodes": "resources.nodes",
    "trainer.n_gpus_per_node": "resources.gpus_per_node",
    "trainer.total_epochs": "trainer.total_epochs",
    "trainer.total_training_steps": "trainer.total_training_steps",
    "trainer.max_actor_ckpt_to_keep": "trainer.max_actor_ckpt_to_keep",
    "trainer.val_before_train": "trainer.val_before_train",
    "trainer.test_freq": "trainer.test_freq",
    "trainer.save_freq": "trainer.save_freq",
    "trainer.resume_mode": "trainer.resume_mode",
    "trainer.resume_from_path": "trainer.resume_from_path",
    "trainer.default_local_dir": "trainer.checkpoint_dir",
}
# Keys the launcher decides itself in some runs (eval, resume, the Ray bootstrap), whether or not this spec's
# training list holds them: the run's name, validation-only mode, the device, Ray's resources.
OWNED_KEYS = ("trainer.experiment_name", "trainer.val_only", "trainer.device", "trainer.critic_warmup",
              "ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus")
# What CPU training sets besides (verl_overrides' docstring): owned too, where the spec trains on CPU.
CPU_KEYS = ("actor_rollout_ref.model.override_config.attn_implementation", "actor_rollout_ref.actor.fsdp_config.strategy",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision", "actor_rollout_ref.rollout.dtype",
            "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.free_cache_engine",
            "actor_rollout_ref.rollout.enable_sleep_mode", "actor_rollout_ref.rollout.agent.num_workers",
            "reward.num_workers", "transfer_queue.backend.SimpleStorage.num_data_storage_units",
            "transfer_queue.backend.SimpleStorage.required_node_resource", "ray_kwargs.ray_init.include_dashboard")


def override_key(item: str) -> str:
    """The dotted key of one Hydra override: `+a.b=1`, `++a.b=1`, `~a.b` and `a.b=1` all give `a.b`."""
    return item.lstrip("+~").partition("=")[0]


def _within(key: str, other: str) -> bool:
    """One key sets (part of) the other: the same key, a key inside it, or a section holding it."""
    return key == other or key.startswith(other + ".") or other.startswith(key + ".")


def override_conflicts(spec: ExperimentSpec) -> list[tuple[int, str]]:
    """(index, what to do instead) for each of `verl.overrides` that sets a key the launcher sets: a typed field's
    (use the field) or one the launcher owns. The chart's _validate.tpl refuses the same (its constants)."""
    owned = OWNED_KEYS + (CPU_KEYS if spec.cpu_training else ())
    out = []
    for i, item in enumerate(spec.verl.overrides):
        key = override_key(item)
        typed = next((k for k in TYPED_KEYS if _within(key, k)), None)
        mine = next((k for k in owned if _within(key, k)), None)
        if typed is not None:
            out.append((i, f"{typed} is the typed field {TYPED_KEYS[typed]}: set that instead"))
        elif mine is not None:
            out.append((i, f"the launcher sets {mine} itself"))
    return out
