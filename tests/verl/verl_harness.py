"""verl's own checks, run the way `python -m verl.trainer.main_ppo` runs them, plus the runtime batch checks.

- `compose(overrides)`: Hydra composes `ppo_trainer` from verl's installed config directory, the same
  config_path/config_name as `@hydra.main` on `verl.trainer.main_ppo.main`.
- `validate(cfg)`: `auto_set_device`, then `validate_config(config, use_reference_policy=
  need_reference_policy(cfg), use_critic=need_critic(cfg))`, exactly `main_ppo.main`'s sequence.
- `runtime_problems(cfg)`: the batch-shape assertions verl 0.9.1 makes only later, inside the v1
  trainer and its workers (shared/notes/verl.md §2.4). Each one either calls verl's code or checks
  that verl's source still holds the assertion reproduced here, so a verl change breaks the test
  instead of silently diverging from it.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import warnings
from pathlib import Path



def verl_dir() -> Path:
    """The installed verl package directory, found without importing verl (no torch needed)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise RuntimeError("verl is not installed: run `make verl-env`")
    return Path(spec.origin).parent


def compose(overrides: list[str]):
    """verl's composed `ppo_trainer` config for `overrides` (raises Hydra's errors unchanged)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_dir() / "trainer" / "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def validate(cfg) -> tuple[bool, bool]:
    """Run main_ppo's validation on `cfg`; returns (need_reference_policy, need_critic). Raises on rejection."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    with warnings.catch_warnings():
        # need_critic warns "Disabled critic as algorithm.adv_estimator != gae": expected for GRPO.
        warnings.simplefilter("ignore", UserWarning)
        use_ref, use_critic = need_reference_policy(cfg), need_critic(cfg)
    validate_config(config=cfg, use_reference_policy=use_ref, use_critic=use_critic)
    return bool(use_ref), bool(use_critic)


def _source(relpath: str) -> str:
    return (verl_dir() / relpath).read_text()


def _require_source(relpath: str, *snippets: str) -> None:
    text = _source(relpath)
    for snippet in snippets:
        if snippet not in text:
            raise AssertionError(f"verl/{relpath} no longer contains {snippet!r}: re-read it and update harness.py")


def _verl_function(relpath: str, name: str, namespace: dict):
    """Compile one function from verl's source on its own (its module imports transfer_queue, Ray, ...)."""
    tree = ast.parse(_source(relpath))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    code = compile(ast.Module(body=[node], type_ignores=[]), os.fspath(verl_dir() / relpath), "exec")
    exec(code, namespace)  # noqa: S102 - verl's own code, from the installed package
    return namespace[name]


def _micro_batches(n_samples: int, micro_batch_size_per_gpu: int) -> None:
    """verl's `prepare_micro_batches` (fixed batch size, as with use_dynamic_bsz=False) on n_samples rows.

    Raises verl's AssertionError when n_samples is not a multiple of the micro-batch.
    """
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches

    data = tu.get_tensordict(
        {"input_ids": torch.zeros(n_samples, 1, dtype=torch.long)},
        non_tensor_dict={"use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro_batch_size_per_gpu},
    )
    prepare_micro_batches(data=data, dp_group=None)


def runtime_problems(cfg) -> list[str]:
    """The batch-shape checks verl makes after validate_config, for FSDP without dynamic batch size.

    Returns one message per check that would fail at run time (empty: the shapes are accepted).
    """
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.strategy in ("fsdp", "fsdp2") and not actor.use_dynamic_bsz
    # FSDP data-parallel size = all GPUs when Ulysses sequence parallelism is off (the spec has no knob).
    assert actor.get("ulysses_sequence_parallel_size", 1) == 1
    n_gpus = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
    dp = n_gpus
    problems: list[str] = []

    # (1) Rollout device mesh, verl/workers/engine_workers.py (building the rollout in the actor worker):
    #     assert self.world_size % infer_world_size == 0, infer_world_size = tp * rollout dp * rollout pp.
    _require_source("workers/engine_workers.py", "assert self.world_size % infer_world_size == 0")
    infer_world = rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size
    if n_gpus % infer_world:
        problems.append(f"engine_workers: world_size {n_gpus} % rollout infer_world_size {infer_world} != 0")
        return problems

    # (2) The v1 trainer pads each step's batch to a multiple of lcm(dp, ppo_mini_batch_size * n)
    #     (trainer_base.py `_get_required_batch_multiple`, run here from verl's source) before computing
    #     log-probs, so the per-GPU batch of the log-prob pass is padded_size / dp.
    required_multiple = _verl_function("trainer/ppo/v1/trainer_base.py", "_get_required_batch_multiple", {"math": math})
    _require_source("trainer/ppo/v1/trainer_base.py", "batch = upsample_batch_to_divisible_size(batch, batch_multiple,")

    class _Trainer:  # the attributes _get_required_batch_multiple reads
        use_critic = False
        config = cfg
        global_steps = 1

    multiple = required_multiple(_Trainer(), dp)
    samples = cfg.data.train_batch_size * rollout.n
    padded = math.ceil(samples / multiple) * multiple

    # (3) Old log-probs (and the reference's, with a KL term): TrainingWorker.infer_batch splits the
    #     per-GPU batch into micro-batches of log_prob_micro_batch_size_per_gpu (engine/utils.py
    #     prepare_micro_batches: "data size must be divisible by force_group_size * micro_batch_size_per_gpu").
    _require_source("workers/engine_workers.py", "micro_batch_size_per_gpu=self.engine_config.infer_micro_batch_size_per_gpu")
    micro_sizes = {"rollout.log_prob_micro_batch_size_per_gpu": rollout.log_prob_micro_batch_size_per_gpu}
    if cfg.algorithm.use_kl_in_reward or actor.use_kl_loss:
        micro_sizes["ref.log_prob_micro_batch_size_per_gpu"] = cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
    for name, micro in micro_sizes.items():
        try:
            _micro_batches(padded // dp, micro)
        except AssertionError as exc:
            problems.append(f"log-prob pass: {padded // dp} samples per GPU, {name}={micro}: {exc}")

    # (4) Actor update, TrainingWorker.train_mini_batch (engine_workers.py):
    #     assert mini_batch_size % self.engine.get_data_parallel_size() == 0, with mini_batch_size =
    #     ppo_mini_batch_size * rollout.n (trainer_base.py `_update_actor`).
    _require_source(
        "workers/engine_workers.py",
        "assert mini_batch_size % self.engine.get_data_parallel_size() == 0",
        "mini_batch_size_per_gpu = mini_batch_size // self.engine.get_data_parallel_size()",
    )
    _require_source(
        "trainer/ppo/v1/trainer_base.py",
        "ppo_mini_batch_size = ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n",
    )
    mini = actor.ppo_mini_batch_size * rollout.n
    if mini % dp:
        problems.append(f"train_mini_batch: mini_batch_size {mini} % data-parallel size {dp} != 0")
        return problems

    # (5) ...then each per-GPU mini-batch is split into micro-batches of ppo_micro_batch_size_per_gpu
    #     (TrainingWorker.train_batch → prepare_micro_batches, the same assertion as in (3)).
    _require_source("workers/engine_workers.py", "micro_batch_size_per_gpu=self.engine_config.micro_batch_size_per_gpu")
    try:
        _micro_batches(mini // dp, actor.ppo_micro_batch_size_per_gpu)
    except AssertionError as exc:
        problems.append(f"actor update: {mini // dp} samples per GPU per mini-batch, "
                        f"ppo_micro_batch_size_per_gpu={actor.ppo_micro_batch_size_per_gpu}: {exc}")
    return problems
