"""`verl_overrides(spec)` against verl 0.9.1's real Hydra config and its own validation.

For exp3 and exp4 on every backend: the override list is the same, composes under `ppo_trainer`
exactly as `python -m verl.trainer.main_ppo` composes it, every override lands on the key it names
with the value it says, `validate_config` passes with main_ppo's arguments, and the runtime batch
checks (verl_harness.runtime_problems) pass. Also: eval mode, a 2-node variant (and the command the entrypoint
runs in a 2-node TrainJob's pod, from Trainer v2's environment), Ray's CPU count, and a
misspelled key (refused by verl's compose and by our spec).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.errors import BadInput
from launcher.spec.names import BACKENDS
from launcher.spec.verl import hydra_value, verl_overrides

from verl_harness import compose, runtime_problems, validate

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"grpo-exp3": ROOT / "configs" / "grpo-exp3.yaml", "grpo-exp4": ROOT / "configs" / "grpo-exp4.yaml"}
# verl.md §1.1: the two experiments differ in exactly these values.
EXPECTED = {"grpo-exp3": {"n": 2, "response": 256}, "grpo-exp4": {"n": 4, "response": 512}}


def _composed_value(cfg, key: str) -> str:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    value = OmegaConf.select(cfg, key.removeprefix("+"), throw_on_missing=True)  # `+key` appended a new key
    if isinstance(value, DictConfig):  # a Hydra dict literal, {k:v,...} in the override's order
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in OmegaConf.to_container(value).items()) + "}"
    if isinstance(value, ListConfig):
        value = OmegaConf.to_container(value)
    return hydra_value(value)


def assert_every_override_applied(cfg, overrides: list[str]) -> None:
    """Each `key=value` is in the composed config with that value (not just accepted by Hydra)."""
    for item in overrides:
        key, _, text = item.partition("=")
        assert _composed_value(cfg, key) == text, item


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_train_overrides_compose_and_validate(name):
    per_backend = {b: verl_overrides(load_spec(CONFIGS[name], backend=b)) for b in BACKENDS}
    # the same verl run on either backend, except the checkpoint directory: per run (job name, config hash)
    ckpt = "trainer.default_local_dir="
    same = {b: [o for o in ov if not o.startswith(ckpt)] for b, ov in per_backend.items()}
    assert same["pytorchjob"] == same["rayjob"] == same["trainjob"]
    for b, ov in per_backend.items():
        assert f"{ckpt}{load_spec(CONFIGS[name], backend=b).checkpoint_path}" in ov
    spec = load_spec(CONFIGS[name])
    overrides = per_backend["pytorchjob"]

    cfg = compose(overrides)
    assert_every_override_applied(cfg, overrides)
    assert validate(cfg) == (False, False)  # GRPO without KL: no reference policy, no critic
    assert runtime_problems(cfg) == []

    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert rollout.n == spec.rollout.n == EXPECTED[name]["n"]
    assert cfg.data.max_response_length == spec.data.max_response_length == EXPECTED[name]["response"]
    assert rollout.response_length == spec.data.max_response_length  # ${oc.select:data.max_response_length}
    assert rollout.prompt_length == cfg.data.max_prompt_length == spec.data.max_prompt_length
    assert cfg.trainer.default_local_dir == spec.checkpoint_path == f"/workspace/checkpoints/verl_grpo_gsm8k/{spec.job_name}"
    assert cfg.trainer.experiment_name == name
    assert cfg.data.train_batch_size == spec.data.train_batch_size == 8
    assert actor.ppo_mini_batch_size == 8 and actor.ppo_micro_batch_size_per_gpu == 2
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (2, 1)
    assert cfg.trainer.total_training_steps == 25 and cfg.trainer.save_freq == 25
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.test_freq == -1  # the spec's (entrypoint.resume)
    assert cfg.trainer.val_before_train is False and cfg.trainer.val_only is False
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.data.train_files == spec.data.train_path and cfg.data.val_files == spec.data.val_path
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-3B-Instruct"
    assert cfg.algorithm.adv_estimator == "grpo" and actor.use_kl_loss is False
    assert cfg.trainer.use_v1 is True  # the default trainer: the image must carry transfer_queue


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_eval_overrides_compose_and_validate(name):
    spec = load_spec(CONFIGS[name])
    overrides = verl_overrides(spec, mode="eval", model="/x")
    cfg = compose(overrides)
    assert_every_override_applied(cfg, overrides)
    validate(cfg)
    assert cfg.actor_rollout_ref.model.path == "/x"
    assert cfg.trainer.val_only is True and cfg.trainer.val_before_train is True  # both needed (verl.md §3)
    assert cfg.trainer.save_freq == -1 and cfg.trainer.test_freq == -1
    assert cfg.actor_rollout_ref.rollout.val_kwargs.do_sample is False  # greedy evaluation


def test_two_node_variant():
    spec = load_spec(CONFIGS["grpo-exp3"], ["resources.nodes=2"])
    overrides = verl_overrides(spec)
    cfg = compose(overrides)
    assert_every_override_applied(cfg, overrides)
    validate(cfg)
    assert runtime_problems(cfg) == []
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 2)


def test_two_node_trainjob_entrypoint_command(tmp_path, capsys):
    # What rank 0 of a 2-node TrainJob runs: the entrypoint's own --dry-run command line, from the pod's
    # environment as Kubeflow Trainer v2.2 sets it (tests/trainjob_env.py), composed and validated by verl.
    import shlex
    import sys

    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    from trainjob_env import trainjob_pod_env

    from launcher.entrypoint.__main__ import VERL_COMMAND, main
    from launcher.entrypoint.environment import ContainerProbe

    config = tmp_path / "tj.yaml"
    config.write_text(yaml.safe_dump({"base": str(CONFIGS["grpo-exp3"]), "backend": "trainjob",
                                      "resources": {"nodes": 2}}))
    spec = load_spec(config)
    probe = ContainerProbe(cpus=16, memory_bytes=128 << 30, shm_bytes=16 << 30)
    code = main(["--config", str(config), "--dry-run"], container_env=trainjob_pod_env(spec, 0, base={"PATH": "/usr/bin"}),
                probe=probe, prepare=lambda *a, **k: pytest.fail("dry-run must not prepare data"))
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# role: ray-head"
    argv = shlex.split(lines[lines.index("# command") + 1])
    assert argv[:len(VERL_COMMAND)] == VERL_COMMAND
    overrides = argv[len(VERL_COMMAND):]
    assert overrides == verl_overrides(spec)  # attached to the pods' Ray cluster: no ray_num_cpus
    cfg = compose(overrides)
    assert_every_override_applied(cfg, overrides)
    validate(cfg)
    assert runtime_problems(cfg) == []
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 2)


def test_ray_num_cpus():
    spec = load_spec(CONFIGS["grpo-exp4"])
    overrides = verl_overrides(spec, ray_num_cpus=16)
    cfg = compose(overrides)
    assert cfg.ray_kwargs.ray_init.num_cpus == 16
    validate(cfg)


def test_misspelled_key_rejected_by_verl_and_by_spec():
    from hydra.errors import ConfigCompositionException

    overrides = verl_overrides(load_spec(CONFIGS["grpo-exp3"]))
    with pytest.raises(ConfigCompositionException, match="ppo_mini_batchsize"):
        compose([*overrides, "actor_rollout_ref.actor.ppo_mini_batchsize=8"])
    with pytest.raises(ConfigCompositionException, match="Could not override 'trainer.foo'"):
        compose([*overrides, "trainer.foo=1"])
    with pytest.raises(BadInput, match="ppo_mini_batchsize"):
        load_spec(CONFIGS["grpo-exp3"], ["actor.ppo_mini_batchsize=8"])


# --------------------------------------------------------------------------------------------------
# CPU training: configs/grpo-exp3-cpu.yaml (docker/verl-cpu/README.md §2)

CPU_CONFIG = ROOT / "configs" / "grpo-exp3-cpu.yaml"


def _cpu_argv(tmp_path, capsys, backend: str, nodes: int) -> tuple[object, list[str]]:
    """The spec and the verl command line the entrypoint's --dry-run prints for the pod that runs verl's driver."""
    import shlex
    import sys

    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    from trainjob_env import trainjob_pod_env

    from launcher.entrypoint.__main__ import VERL_COMMAND, main
    from launcher.entrypoint.environment import ContainerProbe

    config = tmp_path / "cpu.yaml"
    config.write_text(yaml.safe_dump({"base": str(CPU_CONFIG), "backend": backend, "resources": {"nodes": nodes}}))
    spec = load_spec(config)
    env = {"PATH": "/usr/bin", "HOME": "/home/verl", "VIRTUAL_ENV": "/opt/venv"}
    if backend == "rayjob":
        env["RAY_ADDRESS"] = "10.0.0.1:6379"
    elif backend == "trainjob":
        env = trainjob_pod_env(spec, 0, base=env)
    elif nodes > 1:
        env.update(MASTER_ADDR=f"{spec.job_name}-master-0", MASTER_PORT="23456", WORLD_SIZE=str(nodes), RANK="0")
    probe = ContainerProbe(cpus=2, memory_bytes=12 << 30, shm_bytes=2 << 30)
    assert main(["--config", str(config), "--dry-run"], container_env=env, probe=probe,
                prepare=lambda *a, **k: pytest.fail("dry-run must not prepare data")) == 0
    lines = capsys.readouterr().out.splitlines()
    argv = shlex.split(lines[lines.index("# command") + 1])
    assert argv[:len(VERL_COMMAND)] == VERL_COMMAND
    return spec, argv[len(VERL_COMMAND):]


@pytest.mark.parametrize("backend,nodes", [("pytorchjob", 1), ("trainjob", 1), ("pytorchjob", 2), ("rayjob", 1),
                                           ("rayjob", 2), ("trainjob", 2)])
def test_cpu_training_overrides_compose_and_validate(tmp_path, capsys, backend, nodes):
    """What the pod that runs verl's driver runs: the `+` keys compose, every item lands, validate_config and the
    runtime batch checks pass, one trainer process per CPU pod."""
    spec, overrides = _cpu_argv(tmp_path, capsys, backend, nodes)
    assert overrides[:len(verl_overrides(spec))] == verl_overrides(spec, ray_num_cpus=2 if spec.verl_starts_ray
                                                                   else None)
    cfg = compose(overrides)
    assert_every_override_applied(cfg, overrides)
    assert validate(cfg) == (False, False)
    assert runtime_problems(cfg) == []
    actor, rollout, fsdp = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor.fsdp_config
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (1, nodes)
    assert (actor.strategy, fsdp.strategy, dict(fsdp.mixed_precision)) == (
        "fsdp2", "fsdp2", {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"})
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert (rollout.name, rollout.dtype, rollout.enforce_eager, rollout.free_cache_engine, rollout.enable_sleep_mode,
            rollout.agent.num_workers, rollout.tensor_model_parallel_size) == ("vllm", "float32", True, False, False, 1, 1)
    assert cfg.reward.num_workers == 1 and cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert dict(cfg.reward.custom_reward_function) == {"path": "pkg://grpo_verl_cpu.reward", "name": "compute_score"}
    assert cfg.actor_rollout_ref.model.path == "/opt/grpo-launcher/models/tiny-qwen2"
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (128, 32)
    assert (actor.optim.lr, cfg.trainer.total_training_steps, cfg.trainer.total_epochs) == (3e-3, 25, 9)
    ray_init = cfg.ray_kwargs.ray_init
    if spec.verl_starts_ray:  # verl starts the pod's Ray: one logical GPU, 16 logical CPUs
        assert (ray_init.num_gpus, ray_init.num_cpus) == (1, 16)
    else:  # attached: ray.init takes no resources
        assert "num_gpus" not in ray_init and ray_init.num_cpus is None
    if backend == "rayjob":  # KubeRay's workers get the CPU platform through the job's runtime_env
        assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"
        assert ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "grpo_verl_cpu.platform"
        assert ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE == "1"
    else:
        assert "env_vars" not in ray_init.runtime_env


def test_cpu_training_validates_under_the_cpu_platform():
    """main_ppo's auto_set_device under the image's verl CPU platform (selected by env_for's variables) keeps
    trainer.device=cpu; without it verl falls back to cuda. Run in a child: the platform module patches torch."""
    import json
    import subprocess
    import sys

    from launcher.entrypoint.environment import env_for

    spec = load_spec(CPU_CONFIG)
    pod = env_for(spec, {"VIRTUAL_ENV": "/opt/venv"})
    # the pod's platform selection; LD_PRELOAD names the image's Intel OpenMP, which this venv does not have
    env = {**{k: pod[k] for k in ("VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "TORCHDYNAMO_DISABLE")},
           "PATH": "/usr/bin:/bin", "HOME": str(ROOT), "PYTHONPATH": f"{ROOT / 'docker' / 'verl-cpu'}:{ROOT / 'tests' / 'verl'}"}
    code = (
        "import json, sys\n"
        "from verl_harness import compose, validate, runtime_problems\n"
        "cfg = compose(json.loads(sys.argv[1]))\n"
        "print(json.dumps({'need': validate(cfg), 'device': cfg.trainer.device, 'runtime': runtime_problems(cfg)}))\n"
    )
    overrides = verl_overrides(spec, ray_num_cpus=2)
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code, json.dumps(overrides)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Platform override from VERL_PLATFORM: cpu" in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"need": [False, False], "device": "cpu", "runtime": []}


def test_user_overrides_compose_validate_and_land(capsys):
    """verl.overrides: appended after the launcher's list, composed and validated by verl itself; each lands on its
    key (a new key with `+`, a deletion with `~`); `launcher validate` says verl checked them."""
    from launcher.cli.main import main

    items = ["actor_rollout_ref.rollout.max_num_batched_tokens=2048",
             "++actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra]",
             "+trainer.launcher_note=from-the-user"]
    spec = load_spec(CONFIGS["grpo-exp3"], [f"verl.overrides={items!r}"])
    cfg = compose(verl_overrides(spec))
    validate(cfg)
    assert cfg.actor_rollout_ref.rollout.max_num_batched_tokens == 2048
    assert list(cfg.actor_rollout_ref.actor.checkpoint.save_contents) == ["model", "optimizer", "extra"]
    assert cfg.trainer.launcher_note == "from-the-user"
    assert main(["validate", str(CONFIGS["grpo-exp3"]), *[a for i in items for a in ("--verl", i)]]) == 0
    assert "verl.overrides: 3 appended; composed and validated by verl: " in capsys.readouterr().out


@pytest.mark.parametrize("item, words", [
    ("actor_rollout_ref.rollout.no_such_key=1", "no_such_key"),  # Hydra: a key verl's config lacks needs `+`
    ("actor_rollout_ref.rollout.max_num_batched_tokens=[1,2", "[1,2"),  # Hydra's grammar: unbalanced bracket
])
def test_user_overrides_verl_refuses_are_exit_2_naming_them(item, words, capsys):
    from launcher.cli.main import main

    with pytest.raises(Exception):
        compose(verl_overrides(load_spec(CONFIGS["grpo-exp3"], [f"verl.overrides={[item]!r}"])))
    assert main(["validate", str(CONFIGS["grpo-exp3"]), "--verl", item]) == 2
    err = capsys.readouterr().err
    assert "verl.overrides: verl refused the override list: " in err and words in err


def test_a_reward_file_shipped_in_the_configmap_is_what_verl_calls(tmp_path):
    """reward.function.path: ./my_reward.py: verl's own loader (get_custom_reward_fn, as its reward workers call it)
    imports the file as the run's ConfigMap carries it, from the path the launcher's override names."""
    import yaml
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from launcher.render.manifests import render
    from launcher.spec.contract import REWARD_FILE_KEY, REWARD_FILE_PATH

    (tmp_path / "my_reward.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return 0.6875 if len(solution_str) % 2 == 0 else 0.3125\n")
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"base": str(CONFIGS["grpo-exp3"]),
                                      "reward": {"function": {"path": "./my_reward.py", "name": "score"}}}))
    spec = load_spec(config)
    cfg = compose(verl_overrides(spec))
    validate(cfg)
    assert (cfg.reward.custom_reward_function.path, cfg.reward.custom_reward_function.name) == (REWARD_FILE_PATH, "score")
    mounted = tmp_path / "etc-grpo" / REWARD_FILE_KEY  # the pod's read-only ConfigMap mount, here a directory
    mounted.parent.mkdir()
    mounted.write_text(next(o for o in render(spec) if o["kind"] == "ConfigMap")["data"][REWARD_FILE_KEY])
    cfg.reward.custom_reward_function.path = str(mounted)
    fn = get_custom_reward_fn(cfg)
    assert [fn("openai/gsm8k", s, "72") for s in ("ab", "abc")] == [0.6875, 0.3125]
