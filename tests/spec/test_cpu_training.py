"""CPU training (workload grpo on CPU-only pods, the CPU image): the spec's rules, built-in models, the one override
list and its CPU additions, the canonical form that keeps existing configs' hashes, and configs/grpo-exp3-cpu.yaml.

The CPU additions are held to the list that trained on this machine's host (docker/verl-cpu/README.md §2, read from
the README itself), and exp3's GPU list to its text before CPU training existed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from launcher.errors import BadInput
from launcher.spec import contract as C
from launcher.spec.load import dump_spec, load_raw, load_spec, spec_from_raw
from launcher.spec.model import ExperimentSpec, RolloutSpec
from launcher.spec.rules import check_rules
from launcher.spec.verl import CPU_RAY_MIN_CPUS, model_path, verl_overrides

REPO = Path(__file__).resolve().parents[2]
EXP3 = REPO / "configs" / "grpo-exp3.yaml"
EXP3_CPU = REPO / "configs" / "grpo-exp3-cpu.yaml"
SMOKE_CPU = REPO / "configs" / "smoke-cpu.yaml"
CPU_IMAGE = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
# exp3's override list as `launcher validate --show-overrides` printed it before CPU training existed
# (commit dc595b2): the GPU list, its order and its config hash (in default_local_dir) must not move.
EXP3_GPU_LIST = [
    "algorithm.adv_estimator=grpo",
    "algorithm.norm_adv_by_std_in_grpo=True",
    "algorithm.use_kl_in_reward=False",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "data.train_files=/workspace/data/gsm8k/train.parquet",
    "data.val_files=/workspace/data/gsm8k/test.parquet",
    "data.train_batch_size=8",
    "data.max_prompt_length=512",
    "data.max_response_length=256",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.model.trust_remote_code=False",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.strategy=fsdp",
    "actor_rollout_ref.actor.optim.lr=1e-06",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0.0",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.fsdp_config.param_offload=False",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,file]",
    "trainer.project_name=verl_grpo_gsm8k",
    "trainer.experiment_name=grpo-exp3",
    "trainer.n_gpus_per_node=2",
    "trainer.nnodes=1",
    "trainer.total_epochs=1",
    "trainer.total_training_steps=25",
    "trainer.default_local_dir=/workspace/checkpoints/verl_grpo_gsm8k/grpo-exp3-4db290d5",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
    "trainer.save_freq=25",
    "trainer.resume_mode=auto",  # the spec's; the entrypoint points verl's tracker at its decision
]
# What verl needs on CPU and nothing else: the CPU-only items of docker/verl-cpu/README.md §2.
CPU_ONLY = {
    "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "actor_rollout_ref.rollout.dtype": "float32",
    "actor_rollout_ref.rollout.enforce_eager": "True",
    "actor_rollout_ref.rollout.free_cache_engine": "False",
    "+actor_rollout_ref.rollout.enable_sleep_mode": "False",
    "actor_rollout_ref.rollout.agent.num_workers": "1",
    "reward.num_workers": "1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": "1",
    "+transfer_queue.backend.SimpleStorage.required_node_resource": "GPU",
    "+ray_kwargs.ray_init.num_gpus": "1",
    "+ray_kwargs.ray_init.include_dashboard": "False",
    "trainer.device": "cpu",
}


def _pairs(overrides: list[str]) -> dict[str, str]:
    out = dict(item.split("=", 1) for item in overrides)
    assert len(out) == len(overrides), "a key appears twice"
    return out


def _problems(config: Path, sets: list[str]) -> list[str]:
    with pytest.raises(BadInput) as err:
        load_spec(config, sets)
    return [line.removeprefix("  - ") for line in str(err.value).splitlines() if line.startswith("  - ")]


def _readme_list() -> list[str]:
    """The override list of the 25-step host run, from docker/verl-cpu/README.md."""
    text = (REPO / "docker" / "verl-cpu" / "README.md").read_text()
    block = text.split("### The override list that trained", 1)[1].split("```", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------------
# configs/grpo-exp3-cpu.yaml


def test_exp3_cpu_is_exp3s_algorithm_with_a_tiny_model_on_cpu():
    cpu, gpu = load_spec(EXP3_CPU), load_spec(EXP3)
    assert load_raw(EXP3_CPU).get("name") == "grpo-exp3-cpu" and "base: grpo-exp3.yaml" in EXP3_CPU.read_text()
    assert cpu.algorithm == gpu.algorithm and cpu.algorithm.adv_estimator == "grpo"
    assert not cpu.algorithm.use_kl_in_reward and not cpu.algorithm.use_kl_loss
    assert (cpu.data.train_batch_size, cpu.rollout.n, cpu.actor.ppo_mini_batch_size,
            cpu.actor.ppo_micro_batch_size_per_gpu) == (8, 2, 8, 2)
    assert (cpu.trainer.total_training_steps, cpu.trainer.test_freq, cpu.trainer.val_before_train) == (25, -1, False)
    assert (cpu.rollout.temperature, cpu.algorithm.entropy_coeff) == (gpu.rollout.temperature, 0.0)
    # what changes, and only where CPU needs it
    assert cpu.cpu_training and not gpu.cpu_training
    assert (cpu.resources.nodes, cpu.resources.gpus_per_node, cpu.resources.cpu, cpu.resources.memory,
            cpu.resources.shm_size) == (1, 0, "1500m", "12Gi", "2Gi")
    assert (cpu.image, cpu.image_pull_policy) == (CPU_IMAGE, "IfNotPresent")
    assert (cpu.model.path, cpu.model.offline) == ("builtin:tiny-qwen2", True)
    assert model_path(cpu) == "/opt/grpo-launcher/models/tiny-qwen2"
    assert cpu.data.source_dir == "/opt/grpo-launcher/fixtures/gsm8k"
    assert (cpu.data.max_prompt_length, cpu.data.max_response_length) == (128, 32)
    assert (cpu.actor.strategy, cpu.actor.use_remove_padding, cpu.actor.lr) == ("fsdp2", False, 3.0e-3)
    assert cpu.reward.function is not None
    assert (cpu.reward.function.path, cpu.reward.function.name) == ("pkg://grpo_verl_cpu.reward", "compute_score")
    assert cpu.trainer.logger == ["console", "file"]
    # 24 fixture rows at batch 8 are 3 steps per epoch; verl stops at the end of its epoch loop
    assert cpu.trainer.total_epochs * (24 // cpu.data.train_batch_size) >= cpu.trainer.total_training_steps
    assert (cpu.trainer.total_epochs - 1) * 3 < 25  # and no more epochs than that
    smoke = load_spec(SMOKE_CPU)  # the same real nodes as the smoke config
    assert cpu.scheduling.node_selector == smoke.scheduling.node_selector
    assert cpu.scheduling.tolerations == smoke.scheduling.tolerations


def test_exp3_cpu_says_what_it_is():
    header = "".join(line for line in EXP3_CPU.read_text().splitlines(True) if line.startswith("#"))
    assert "TINY RANDOM MODEL ON CPU" in header and "real in every mechanism" in header
    assert "NOT comparable to exp3's" in header


def test_validate_describes_the_builtin_model(capsys):
    from launcher.cli.main import main

    assert main(["validate", str(EXP3_CPU), "--show-overrides"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(", model builtin:tiny-qwen2 (tiny random Qwen2, 357,632 parameters, in the project's images; "
                           "test model, not Qwen2.5)")
    assert out[1] == "reward.function: compute_score from pkg://grpo_verl_cpu.reward (a module in the image)"
    assert out[2].startswith("health: stall → incident, report; no_signal (advantages all 0, 5 steps) → warn; ")
    assert out[3:] == verl_overrides(load_spec(EXP3_CPU))
    assert main(["validate", str(EXP3)]) == 0
    assert "model" not in capsys.readouterr().out  # a hub model is not described


# --------------------------------------------------------------------------------------------------
# refusals: each names the field, what was expected and what was given


@pytest.mark.parametrize("sets, line", [
    (["image=ghcr.io/grpo-launcher/verl-grpo:0.1.0", "model.path=/models/tiny"],
     "resources.gpus_per_node: expected at least 1 for workload grpo with image ghcr.io/grpo-launcher/verl-grpo:0.1.0 "
     "(0, CPU-only pods, needs an image carrying the verl CPU platform, whose tag ends in -cpu, e.g. "
     "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu; or workload smoke), got 0"),
    (["actor.strategy=fsdp"],
     "actor.strategy: expected fsdp2 on CPU-only pods (resources.gpus_per_node 0: verl's FSDP1 refuses CPU "
     "parameters), got 'fsdp'"),
    (["actor.use_remove_padding=true"],
     "actor.use_remove_padding: expected false on CPU-only pods (resources.gpus_per_node 0: removing padding needs "
     "flash-attn's GPU kernels), got True"),
    (["rollout.tensor_parallel_size=2"],
     "rollout.tensor_parallel_size: expected 1 on CPU-only pods (resources.gpus_per_node 0: one vLLM CPU engine per "
     "pod), got 2"),
    (["rollout.name=sglang"], "rollout.name: expected one of 'vllm', got 'sglang'"),
    (["model.path=builtin:tiny-llama"],
     "model.path: expected a known built-in model (builtin:tiny-qwen2), a hub id or a path inside the pod, "
     "got 'builtin:tiny-llama'"),
    (["model.local_dir=/models/mine"],
     "model.local_dir: expected null with a built-in model (builtin:tiny-qwen2 is already in the image), "
     "got '/models/mine'"),
    (["reward.function.path=./my_reward.txt"],
     "reward.function.path: expected pkg://<dotted.module> (a module in the image) or a local Python file such as "
     "./my_reward.py, got './my_reward.txt'"),
    (["reward.function.name=compute-score"],
     "reward.function.name: expected a string matching ^[A-Za-z_][A-Za-z0-9_]*$, got 'compute-score'"),
], ids=["gpu-image", "fsdp1", "remove-padding", "tp", "rollout-name", "unknown-builtin", "builtin-local-dir",
        "reward-not-python", "reward-name"])
def test_each_cpu_refusal_names_field_expected_and_given(sets, line):
    assert _problems(EXP3_CPU, sets) == [line]


def test_only_the_projects_images_hold_a_builtin_model():
    # the project's GPU image carries it too (docker/Dockerfile), under any registry a user mirrors it to
    for image in ("ghcr.io/grpo-launcher/verl-grpo:0.1.0", "123456789.dkr.ecr.us-east-1.amazonaws.com/verl-grpo:0.1.0"):
        assert load_spec(EXP3, ["model.path=builtin:tiny-qwen2", f"image={image}"]).model.path == "builtin:tiny-qwen2"
    assert _problems(EXP3, ["model.path=builtin:tiny-qwen2", "image=nvcr.io/nvidia/pytorch:25.01-py3"]) == [
        "model.path: expected a model image nvcr.io/nvidia/pytorch:25.01-py3 carries (builtin:tiny-qwen2 is in the "
        "project's images, named verl-grpo in any registry, and in CPU images, whose tag ends in -cpu, e.g. "
        "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu), a hub id or a path inside the pod, got 'builtin:tiny-qwen2'"]


def test_exp3_on_cpu_pods_names_every_setting_at_once():
    fields = [p.split(":")[0] for p in _problems(EXP3, ["resources.gpus_per_node=0"])]
    assert fields == ["resources.gpus_per_node", "actor.strategy", "actor.use_remove_padding"]
    # the smoke workload on the very same pods trains nothing: none of this applies
    load_spec(EXP3, ["resources.gpus_per_node=0", "workload=smoke"])


def test_a_rollout_engine_other_than_vllm_is_refused_by_the_cpu_rule_too():
    """rollout.name is a Literal of one today; should it grow, CPU pods still refuse anything but vLLM."""
    spec = load_spec(EXP3_CPU)
    spec = spec.model_copy(update={"rollout": RolloutSpec.model_construct(**{**dict(spec.rollout), "name": "sglang"})})
    assert [str(p) for p in check_rules(spec)] == [
        "rollout.name: expected vllm on CPU-only pods (resources.gpus_per_node 0: the image carries vLLM's CPU "
        "build), got 'sglang'"]


def test_tensor_parallel_refusal_is_said_once():
    """On CPU pods the generic 'divisor of gpus_per_node' rule would repeat the CPU rule's field: only one line."""
    problems = _problems(EXP3_CPU, ["rollout.tensor_parallel_size=4"])
    assert [p.split(":")[0] for p in problems] == ["rollout.tensor_parallel_size"]


@pytest.mark.parametrize("image, cpu", [
    ("ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu", True),
    ("reg.example:5000/team/verl:2.0-cpu", True),
    ("ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu@sha256:" + "0" * 64, True),  # a pinned digest keeps the tag
    ("ghcr.io/grpo-launcher/verl-grpo:0.1.0", False),
    ("ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu-debug", False),
    ("localhost:5000/verl-cpu", False),  # the registry's port is no tag
    ("verl-cpu@sha256:" + "0" * 64, False),
    ("verl:cpu", False),
])
def test_cpu_image_is_the_tag_convention(image, cpu):
    assert C.is_cpu_image(image) is cpu
    loaded = load_spec(EXP3_CPU, [f"image={image}"]) if cpu else None
    if not cpu:
        assert [p.split(":")[0] for p in _problems(EXP3_CPU, [f"image={image}"])][0] == "resources.gpus_per_node"
    else:
        assert loaded.image == image


# --------------------------------------------------------------------------------------------------
# built-in models (launcher.spec.contract)


def test_builtin_model_resolution():
    assert C.builtin_name("builtin:tiny-qwen2") == "tiny-qwen2" and C.builtin_name("Qwen/Qwen2.5-3B") is None
    tiny = C.builtin_model("builtin:tiny-qwen2")
    assert tiny == C.BuiltinModel("/opt/grpo-launcher/models/tiny-qwen2",
                                  "tiny random Qwen2, 357,632 parameters, in the project's images; test model, not Qwen2.5")
    assert C.builtin_model("builtin:other") is None and C.builtin_model("/opt/grpo-launcher/models/tiny-qwen2") is None
    assert C.describe_model("builtin:tiny-qwen2") == ("builtin:tiny-qwen2 (tiny random Qwen2, 357,632 parameters, in "
                                                      "the project's images; test model, not Qwen2.5)")
    assert C.describe_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    # the size the description states is the one the model's builder documents for seed 0
    assert "357,632 parameters with" in (REPO / "docker/verl-cpu/grpo_verl_cpu/tiny_model.py").read_text()


def test_model_path_is_the_in_image_directory_for_builtins_only():
    cpu = load_spec(EXP3_CPU)
    assert model_path(cpu) == "/opt/grpo-launcher/models/tiny-qwen2"
    assert "actor_rollout_ref.model.path=/opt/grpo-launcher/models/tiny-qwen2" in verl_overrides(cpu)
    # eval's base model is the same directory; a hub model and a local_dir are unchanged
    assert "actor_rollout_ref.model.path=/opt/grpo-launcher/models/tiny-qwen2" in verl_overrides(cpu, mode="eval")
    assert model_path(load_spec(EXP3)) == "Qwen/Qwen2.5-3B-Instruct"
    assert model_path(load_spec(EXP3, ["model.local_dir=/models/q"])) == "/models/q"


# --------------------------------------------------------------------------------------------------
# the override list


def test_gpu_list_is_unchanged():
    assert verl_overrides(load_spec(EXP3)) == EXP3_GPU_LIST
    assert load_spec(EXP3).job_name == "grpo-exp3-4db290d5"  # the canonical form leaves an unset reward out
    for config in (EXP3, REPO / "configs" / "grpo-exp4.yaml", SMOKE_CPU):
        assert not set(_pairs(verl_overrides(load_spec(config)))) & set(CPU_ONLY), config


def test_cpu_list_is_the_gpu_list_plus_the_cpu_items():
    cpu = _pairs(verl_overrides(load_spec(EXP3_CPU)))
    gpu = _pairs(EXP3_GPU_LIST)
    added = {k: v for k, v in cpu.items() if k not in gpu}
    assert added == {**CPU_ONLY, "reward.custom_reward_function.path": "'pkg://grpo_verl_cpu.reward'",
                     "reward.custom_reward_function.name": "compute_score",
                     "ray_kwargs.ray_init.num_cpus": str(CPU_RAY_MIN_CPUS)}
    assert set(gpu) <= set(cpu)  # nothing dropped
    changed = {k for k in gpu if cpu[k] != gpu[k]}
    assert changed == {
        "data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.model.path",
        "actor_rollout_ref.model.use_remove_padding", "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.actor.optim.lr", "trainer.experiment_name", "trainer.n_gpus_per_node",
        "trainer.total_epochs", "trainer.default_local_dir",
    }
    assert (cpu["trainer.n_gpus_per_node"], cpu["actor_rollout_ref.actor.strategy"]) == ("1", "fsdp2")
    # the shared items keep the GPU list's relative order
    assert [k for k in cpu if k in gpu] == list(gpu)


def test_cpu_list_is_the_list_that_trained_on_the_host():
    """docker/verl-cpu/README.md §2: every key, in the same order (num_cpus, pinned by the entrypoint, goes last
    as on GPU pods); values equal except where the run was on the host instead of in a pod."""
    ours = verl_overrides(load_spec(EXP3_CPU), ray_num_cpus=2)
    host = _readme_list()
    key = lambda item: item.split("=", 1)[0]  # noqa: E731
    assert [key(i) for i in ours if key(i) != "ray_kwargs.ray_init.num_cpus"] == \
        [key(i) for i in host if key(i) != "ray_kwargs.ray_init.num_cpus"]
    mine, theirs = _pairs(ours), _pairs(host)
    per_run = {"data.train_files", "data.val_files", "actor_rollout_ref.model.path", "trainer.experiment_name",
               "trainer.default_local_dir"}
    differ = {k for k in theirs if k not in per_run and mine[k] != theirs[k]}
    # only spelling: lr 0.003 / 3e-3, and Hydra quoting of the pkg:// path (both compose to the same value); and the
    # resume mode: the host run had none to make, a pod gets the spec's auto (entrypoint.resume.align_tracker)
    assert differ == {"actor_rollout_ref.actor.optim.lr", "reward.custom_reward_function.path", "trainer.resume_mode"}
    assert (mine["trainer.resume_mode"], theirs["trainer.resume_mode"]) == ("auto", "disable")
    assert float(mine["actor_rollout_ref.actor.optim.lr"]) == float(theirs["actor_rollout_ref.actor.optim.lr"])
    assert mine["reward.custom_reward_function.path"].strip("'") == theirs["reward.custom_reward_function.path"]
    assert mine["ray_kwargs.ray_init.num_cpus"] == theirs["ray_kwargs.ray_init.num_cpus"] == "16"


@pytest.mark.parametrize("ray_num_cpus, expected", [(None, "16"), (2, "16"), (16, "16"), (48, "48")])
def test_cpu_training_declares_at_least_16_logical_cpus(ray_num_cpus, expected):
    ov = _pairs(verl_overrides(load_spec(EXP3_CPU), ray_num_cpus=ray_num_cpus))
    assert ov["ray_kwargs.ray_init.num_cpus"] == expected and ov["+ray_kwargs.ray_init.num_gpus"] == "1"
    assert list(ov)[-1] == "ray_kwargs.ray_init.num_cpus"  # where the GPU list puts it


@pytest.mark.parametrize("sets", [["backend=rayjob"], ["resources.nodes=2"], ["backend=trainjob", "resources.nodes=2"]])
def test_attached_ray_gets_no_ray_init_resources(sets):
    """ray.init refuses resources when attaching (a RayJob's cluster, a multi-node head's): those raylets declare the
    logical GPU themselves (render's rayStartParams, entrypoint `ray start`)."""
    spec = load_spec(EXP3_CPU, sets)
    ov = _pairs(verl_overrides(spec))
    assert "+ray_kwargs.ray_init.num_gpus" not in ov and "ray_kwargs.ray_init.num_cpus" not in ov
    assert ov["trainer.device"] == "cpu" and ov["trainer.n_gpus_per_node"] == "1"
    assert ov["trainer.nnodes"] == str(spec.resources.nodes)
    assert spec.ray_gpus_per_node == 1 and not spec.verl_starts_ray


def test_single_node_trainjob_starts_its_own_ray():
    ov = _pairs(verl_overrides(load_spec(EXP3_CPU, ["backend=trainjob"]), ray_num_cpus=2))
    assert ov["+ray_kwargs.ray_init.num_gpus"] == "1" and ov["ray_kwargs.ray_init.num_cpus"] == "16"


def test_a_reward_function_on_a_gpu_config_adds_only_its_two_items():
    spec = load_spec(EXP3, ["reward.function.path=pkg://team.rewards", "reward.function.name=score"])
    at = EXP3_GPU_LIST.index("actor_rollout_ref.ref.fsdp_config.param_offload=False") + 1
    # a new config (a new hash): its own checkpoint directory, everything else as exp3
    base = [f"trainer.default_local_dir={spec.checkpoint_path}" if item.startswith("trainer.default_local_dir=")
            else item for item in EXP3_GPU_LIST]
    assert spec.checkpoint_path not in "".join(EXP3_GPU_LIST)
    assert verl_overrides(spec) == [*base[:at], "reward.custom_reward_function.path='pkg://team.rewards'",
                                    "reward.custom_reward_function.name=score", *base[at:]]
    # name defaults to verl's own default
    assert load_spec(EXP3, ["reward.function.path=pkg://team.rewards"]).reward.function.name == "compute_score"


# --------------------------------------------------------------------------------------------------
# the canonical form: an unset reward section is left out, so existing configs keep their hash


def test_an_unset_reward_is_left_out_of_the_hash_and_the_spec_documents():
    spec = load_spec(EXP3)
    assert "reward" not in spec.canonical_data() and spec.model_dump()["reward"] == {"function": None}
    assert "reward" not in yaml.safe_load(dump_spec(spec))
    assert spec_from_raw(yaml.safe_load(dump_spec(spec))) == spec  # read back: the default
    cpu = load_spec(EXP3_CPU)
    assert cpu.canonical_data()["reward"] == {"function": {"path": "pkg://grpo_verl_cpu.reward", "name": "compute_score"}}
    assert spec_from_raw(yaml.safe_load(dump_spec(cpu))) == cpu
    with_fn = load_spec(EXP3, ["reward.function.path=pkg://team.rewards"])
    assert with_fn.config_hash() != spec.config_hash()  # a set reward is part of the run's identity
