"""`--dry-run`: the exact verl command line (from the shared `verl_overrides`), role, environment, redaction."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from launcher.spec.load import load_spec
from launcher.entrypoint.__main__ import VERL_COMMAND, main
from launcher.entrypoint.environment import ContainerProbe
from launcher.spec.verl import verl_overrides

REPO = Path(__file__).resolve().parents[2]
PROBE = ContainerProbe(cpus=16, memory_bytes=128 << 30, shm_bytes=16 << 30)
POD_ENV = {"HOME": "/home/verl", "POD_NAME": "x", "PATH": "/usr/bin"}


def _dry(capsys, config: Path | str, env: dict, *extra: str) -> tuple[int, str, str]:
    code = main(["--config", str(config), "--dry-run", *extra], container_env=env, probe=PROBE,
                prepare=lambda *a, **k: pytest.fail("dry-run must not prepare data"))
    out = capsys.readouterr()
    return code, out.out, out.err


def _command(out: str) -> str:
    lines = out.splitlines()
    return lines[lines.index("# command") + 1]


def _env(out: str) -> dict[str, str]:
    lines = out.splitlines()
    start = lines.index("# environment (set or changed)") + 1
    env = {}
    for line in lines[start:]:
        if line.startswith("#"):
            break
        key, _, value = line.partition("=")
        env[key] = value
    return env


@pytest.mark.parametrize("name", ["grpo-exp3", "grpo-exp4"])
def test_dry_run_prints_the_shared_verl_command(capsys, name):
    config = REPO / "configs" / f"{name}.yaml"
    code, out, _ = _dry(capsys, config, POD_ENV)
    assert code == 0
    spec = load_spec(config)
    cmd = _command(out)
    assert cmd.startswith("python3 -m verl.trainer.main_ppo ")
    assert cmd == shlex.join([*VERL_COMMAND, *verl_overrides(spec, ray_num_cpus=16)])
    assert f"trainer.experiment_name={name}" in cmd
    assert "ray_kwargs.ray_init.num_cpus=16" in cmd  # single node: Ray pinned to the CPU limit
    assert out.splitlines()[0] == "# role: single-node"
    env = _env(out)
    assert env["HF_HOME"] == "/workspace/hf"
    assert env["RAY_COLOR_PREFIX"] == "0" and env["RAY_DEDUP_LOGS"] == "0"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["TOKENIZERS_PARALLELISM"] == "false"
    assert env["XDG_CACHE_HOME"] == "/home/verl/.cache"
    assert env["TRITON_CACHE_DIR"] == "/home/verl/.cache/triton"
    assert env["RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES"] == str(8 << 30)  # half of a 16 GiB /dev/shm
    assert env["VERL_FILE_LOGGER_PATH"].startswith(f"/workspace/checkpoints/verl_grpo_gsm8k/{spec.job_name}/metrics/")
    assert env["VERL_FILE_LOGGER_PATH"].endswith(".jsonl")
    assert list(env) == sorted(env)
    assert "HF_HUB_OFFLINE" not in env and "RAY_AUTH_MODE" not in env
    assert "RAY_ADDRESS" not in env


def test_dry_run_exp4_differs_from_exp3_only_where_the_config_does(capsys):
    _, out3, _ = _dry(capsys, REPO / "configs" / "grpo-exp3.yaml", POD_ENV)
    _, out4, _ = _dry(capsys, REPO / "configs" / "grpo-exp4.yaml", POD_ENV)
    a, b = set(shlex.split(_command(out3))), set(shlex.split(_command(out4)))
    assert b - a == {
        "data.max_response_length=512", "actor_rollout_ref.rollout.n=4", "trainer.experiment_name=grpo-exp4",
        f"trainer.default_local_dir=/workspace/checkpoints/verl_grpo_gsm8k/{load_spec(REPO / 'configs' / 'grpo-exp4.yaml').job_name}",
    }
    assert a - b == {f"trainer.default_local_dir=/workspace/checkpoints/verl_grpo_gsm8k/"
                     f"{load_spec(REPO / 'configs' / 'grpo-exp3.yaml').job_name}", "data.max_response_length=256",
                     "actor_rollout_ref.rollout.n=2", "trainer.experiment_name=grpo-exp3"}


def test_secrets_are_redacted(capsys, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "base": str(REPO / "configs" / "grpo-exp3.yaml"),
        "secrets": {"hf_token": {"name": "hf", "key": "token"}},
        "model": {"offline": True},
    }))
    env = {**POD_ENV, "HF_TOKEN": "hf_SECRETVALUE", "WANDB_API_KEY": "wandb-secret",
           "MY_PASSWORD": "pw-secret", "RAY_AUTH_TOKEN": "ray-secret"}
    code, out, err = _dry(capsys, config, env)
    assert code == 0
    for secret in ("hf_SECRETVALUE", "wandb-secret", "pw-secret", "ray-secret"):
        assert secret not in out and secret not in err
    assert "HF_TOKEN=<redacted>" in out
    assert "WANDB_API_KEY=<redacted>" in out
    assert "MY_PASSWORD=<redacted>" in out
    assert "TOKENIZERS_PARALLELISM=false" in out  # a setting, not a secret
    set_env = _env(out)
    assert set_env["HF_HUB_OFFLINE"] == set_env["HF_DATASETS_OFFLINE"] == set_env["TRANSFORMERS_OFFLINE"] == "1"


def test_missing_secret_is_reported_by_name(capsys, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "base": str(REPO / "configs" / "grpo-exp3.yaml"),
        "secrets": {"hf_token": {"name": "hf", "key": "token"}},
    }))
    _, out, _ = _dry(capsys, config, POD_ENV)
    assert "# warning: spec.secrets sets HF_TOKEN (Secret hf/token) but it is not in this environment" in out


def test_rayjob_driver_attaches_and_never_pins_cpus(capsys, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"base": str(REPO / "configs" / "grpo-exp3.yaml"), "backend": "rayjob",
                                      "resources": {"nodes": 2}}))
    code, out, _ = _dry(capsys, config, {**POD_ENV, "RAY_ADDRESS": "10.0.0.1:6379"})
    assert code == 0
    assert out.splitlines()[0] == "# role: ray-job-driver"
    cmd = _command(out)
    assert "ray_kwargs.ray_init.num_cpus" not in cmd
    assert "trainer.nnodes=2" in cmd and "trainer.n_gpus_per_node=2" in cmd
    env = _env(out)
    assert "RAY_AUTH_MODE" not in env and "RAY_ADDRESS" not in env  # KubeRay's settings are left alone
    assert "# ray:" not in out  # never starts Ray


def test_rayjob_without_ray_address_is_refused_at_run_time(capsys, tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"base": str(REPO / "configs" / "grpo-exp3.yaml"), "backend": "rayjob"}))
    code = main(["--config", str(config)], container_env=POD_ENV, probe=PROBE, prepare=lambda *a, **k: None)
    assert code == 2
    assert "RAY_ADDRESS is not set" in capsys.readouterr().err


def _multinode(tmp_path) -> Path:
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"base": str(REPO / "configs" / "grpo-exp3.yaml"), "resources": {"nodes": 4}}))
    return config


def _operator_env(rank: int, job: str = "grpo-exp3-1a2b3c4d") -> dict[str, str]:
    """What the training-operator v1.9 sets (pkg/controller.v1/pytorch/envvar.go, master.go)."""
    return {
        **POD_ENV, "MASTER_ADDR": f"{job}-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": str(rank),
        "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(rank), "PET_NNODES": "4",
        "POD_NAME": f"{job}-master-0" if rank == 0 else f"{job}-worker-{rank - 1}",
    }


def test_multinode_master_is_the_ray_head(capsys, tmp_path):
    code, out, _ = _dry(capsys, _multinode(tmp_path), _operator_env(0))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# role: ray-head"
    assert lines[1] == "# rank 0 of 4; master grpo-exp3-1a2b3c4d-master-0 (grpo-exp3-1a2b3c4d-master-0)"
    ray = shlex.split(lines[2].removeprefix("# ray: "))
    assert ray[1:3] == ["start", "--head"]
    assert {"--port=6379", "--num-cpus=16", "--num-gpus=2", "--block", "--include-dashboard=false"} <= set(ray)
    assert '--resources={"grpo_node_rank_0":1}' in ray
    cmd = _command(out)
    assert "ray_kwargs.ray_init.num_cpus" not in cmd and "trainer.nnodes=4" in cmd
    assert _env(out)["RAY_AUTH_MODE"] == "disabled"


def test_multinode_worker_joins_the_master(capsys, tmp_path):
    code, out, _ = _dry(capsys, _multinode(tmp_path), {**_operator_env(2), "RAY_AUTH_TOKEN": "tok"})
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# role: ray-worker"
    ray = shlex.split(lines[2].removeprefix("# ray: "))
    assert "--address=grpo-exp3-1a2b3c4d-master-0:6379" in ray and "--head" not in ray
    assert '--resources={"grpo_node_rank_2":1}' in ray
    env = _env(out)
    assert env["RAY_AUTH_MODE"] == "token"  # a shared token in the pod switches token auth on
    # verl's TaskRunner (which writes the metrics file) may be placed on a worker's raylet
    assert env["VERL_FILE_LOGGER_PATH"].startswith(f"{load_spec(_multinode(tmp_path)).checkpoint_path}/metrics/")


def test_multinode_without_operator_env_is_a_clear_error(capsys, tmp_path):
    code = main(["--config", str(_multinode(tmp_path))], container_env=POD_ENV, probe=PROBE,
                prepare=lambda *a, **k: None)
    assert code == 2
    assert "PET_NODE_RANK/RANK" in capsys.readouterr().err


def test_node_count_mismatch_is_a_clear_error(capsys, tmp_path):
    env = {**_operator_env(1), "PET_NNODES": "2"}
    code = main(["--config", str(_multinode(tmp_path))], container_env=env, probe=PROBE, prepare=lambda *a, **k: None)
    assert code == 2
    assert "PET_NNODES=2 but the spec has resources.nodes=4" in capsys.readouterr().err


def test_bad_config_exits_2_with_the_loaders_message(capsys, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: grpo-exp3\nrollout:\n  nn: 4\n")
    code = main(["--config", str(config), "--dry-run"], container_env=POD_ENV, probe=PROBE)
    assert code == 2
    err = capsys.readouterr().err
    assert "rollout.nn" in err and "invalid experiment config" in err


def test_missing_config_exits_2(capsys, tmp_path):
    code = main(["--config", str(tmp_path / "nope.yaml"), "--dry-run"], container_env=POD_ENV, probe=PROBE)
    assert code == 2
    assert "no such file" in capsys.readouterr().err


def test_eval_mode_passes_mode_and_model_through(capsys):
    config = REPO / "configs" / "grpo-exp3.yaml"
    code, out, _ = _dry(capsys, config, POD_ENV, "--mode", "eval", "--model", "/workspace/merged")
    assert code == 0
    spec = load_spec(config)
    expected = [*VERL_COMMAND, *verl_overrides(spec, mode="eval", model="/workspace/merged", ray_num_cpus=16)]
    assert _command(out) == shlex.join(expected)
    # written out: the given model is evaluated, validation only, nothing saved
    cmd = shlex.split(_command(out))
    assert cmd[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    for override in ("actor_rollout_ref.model.path=/workspace/merged", "trainer.val_only=True",
                     "trainer.val_before_train=True", "trainer.save_freq=-1", "ray_kwargs.ray_init.num_cpus=16"):
        assert override in cmd, override
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct" not in cmd


def test_prepare_data_only_calls_prepare_and_runs_nothing(capsys, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setenv("LAUNCHER_CHILD_CMD", "false")  # would fail if anything were run
    code = main(["--config", str(REPO / "configs" / "grpo-exp3.yaml"), "--prepare-data-only"],
                container_env=POD_ENV, probe=PROBE,
                prepare=lambda spec, *, allow_download: calls.append((spec.name, allow_download)) or None)
    assert code == 0
    assert calls == [("grpo-exp3", True)]
    assert "[entrypoint] preparing data: /workspace/data/gsm8k/train.parquet" in capsys.readouterr().err


def test_prepare_failure_exits_with_its_code(capsys):
    from launcher.errors import RunFailed

    def failing(spec, *, allow_download):
        raise RunFailed("GSM8K is not prepared")

    code = main(["--config", str(REPO / "configs" / "grpo-exp3.yaml"), "--prepare-data-only"],
                container_env=POD_ENV, probe=PROBE, prepare=failing)
    assert code == 1
    assert "data preparation failed: GSM8K is not prepared" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_init_container_needs_no_operator_env(capsys, tmp_path, backend):
    # Neither operator sets RANK/MASTER_ADDR or RAY_ADDRESS in init containers (envvar.go loops over
    # Spec.Containers only), so --prepare-data-only must work without them.
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"base": str(REPO / "configs" / "grpo-exp3.yaml"), "backend": backend,
                                      "resources": {"nodes": 4}}))
    calls = []
    code = main(["--config", str(config), "--prepare-data-only"], container_env=POD_ENV, probe=PROBE,
                prepare=lambda spec, *, allow_download: calls.append(spec.name))
    assert code == 0 and calls == ["grpo-exp3"], capsys.readouterr().err


def test_bad_grace_period_is_bad_input(capsys):
    code = main(["--config", str(REPO / "configs" / "grpo-exp3.yaml")], container_env={**POD_ENV,
                "LAUNCHER_KILL_GRACE_S": "forever"}, probe=PROBE, prepare=lambda *a, **k: None)
    assert code == 2
    assert "LAUNCHER_KILL_GRACE_S='forever'" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_reads_the_configmap_the_manifest_mounts(capsys, tmp_path, backend):
    """Contract with `render`: the mounted spec.yaml loads, and the rendered commands parse here."""
    from launcher.entrypoint.__main__ import parse_args
    from launcher.render.manifests import SPEC_PATH, render

    spec = load_spec(REPO / "configs" / "grpo-exp3.yaml", backend=backend)
    objects = render(spec)
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    mounted = tmp_path / "spec.yaml"
    mounted.write_text(cm["data"]["spec.yaml"])
    env = {**POD_ENV, "RAY_ADDRESS": "10.0.0.1:6379"} if backend == "rayjob" else POD_ENV
    code, out, _ = _dry(capsys, mounted, env)
    assert code == 0
    cpus = 16 if backend == "pytorchjob" else None
    assert _command(out) == shlex.join([*VERL_COMMAND, *verl_overrides(spec, ray_num_cpus=cpus)])
    # written out: the mounted config is grpo-exp3's; Ray is pinned to the probed CPUs only where the
    # entrypoint starts Ray itself (a PyTorchJob pod), never under KubeRay
    cmd = shlex.split(_command(out))
    assert cmd[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert {"trainer.experiment_name=grpo-exp3", "data.train_batch_size=8", "actor_rollout_ref.rollout.n=2",
            "trainer.total_training_steps=25", "trainer.n_gpus_per_node=2"} <= set(cmd)
    assert ("ray_kwargs.ray_init.num_cpus=16" in cmd) == (backend == "pytorchjob")

    job = objects[-1]
    text = yaml.safe_dump(job)
    assert "launcher.entrypoint" in text
    # every command line the manifest gives the entrypoint is one this parser accepts
    def commands(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "command" and isinstance(value, list) and "launcher.entrypoint" in value:
                    yield value
                elif key == "entrypoint" and isinstance(value, str):
                    yield shlex.split(value)
                else:
                    yield from commands(value)
        elif isinstance(node, list):
            for item in node:
                yield from commands(item)

    found = list(commands(job))
    assert found
    for argv in found:
        if argv[:2] == ["/usr/bin/tini", "--"]:  # pods keep tini as PID 1 (render.POD_COMMAND)
            argv = argv[2:]
        assert argv[:3] == ["python3", "-m", "launcher.entrypoint"]
        args = parse_args(argv[3:])
        assert args.config == SPEC_PATH


# --------------------------------------------------------------------------------------------------
# TrainJob (Kubeflow Trainer v2.2): only the PET_* variables, from the torch plugin


def _trainjob_config(tmp_path, nodes: int = 2) -> Path:
    config = tmp_path / "tj.yaml"
    config.write_text(yaml.safe_dump({"base": str(REPO / "configs" / "grpo-exp3.yaml"), "backend": "trainjob",
                                      "resources": {"nodes": nodes}}))
    return config


def _trainjob_env(config: Path, rank: int) -> dict[str, str]:
    from trainjob_env import trainjob_pod_env

    return trainjob_pod_env(load_spec(config), rank, base={"PATH": "/usr/bin"})


def test_trainjob_rank0_is_the_ray_head(capsys, tmp_path):
    config = _trainjob_config(tmp_path)
    env = _trainjob_env(config, 0)
    assert "MASTER_ADDR" not in env and "RANK" not in env  # Trainer sets only PET_*
    job = load_spec(config).job_name
    code, out, _ = _dry(capsys, config, env)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# role: ray-head"
    assert lines[1] == f"# rank 0 of 2; master {job}-node-0-0.{job} ({job}-node-0-0)"
    ray = shlex.split(lines[2].removeprefix("# ray: "))
    assert ray[1:3] == ["start", "--head"] and '--resources={"grpo_node_rank_0":1}' in ray
    cmd = _command(out)
    assert "trainer.nnodes=2" in cmd and "ray_kwargs.ray_init.num_cpus" not in cmd


def test_trainjob_rank1_joins_the_head_at_pet_master_addr(capsys, tmp_path):
    config = _trainjob_config(tmp_path)
    job = load_spec(config).job_name
    code, out, _ = _dry(capsys, config, _trainjob_env(config, 1))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# role: ray-worker"
    ray = shlex.split(lines[2].removeprefix("# ray: "))
    assert f"--address={job}-node-0-0.{job}:6379" in ray and "--head" not in ray
    assert '--resources={"grpo_node_rank_1":1}' in ray


def test_trainjob_same_ray_bootstrap_as_pytorchjob(capsys, tmp_path):
    # The Ray start line of each rank differs from the PyTorchJob's only in the master's address.
    tj = _trainjob_config(tmp_path, nodes=4)
    job = load_spec(tj).job_name
    for rank in range(4):
        env = _trainjob_env(tj, rank)
        _, out_tj, _ = _dry(capsys, tj, env)
        _, out_pt, _ = _dry(capsys, _multinode(tmp_path), {**_operator_env(rank), "POD_IP": env["POD_IP"]})
        ray_tj = out_tj.splitlines()[2].replace(f"{job}-node-0-0.{job}", "MASTER")
        ray_pt = out_pt.splitlines()[2].replace("grpo-exp3-1a2b3c4d-master-0", "MASTER")
        assert ray_tj == ray_pt
        assert out_tj.splitlines()[0] == out_pt.splitlines()[0]


def test_trainjob_node_count_mismatch_is_a_clear_error(capsys, tmp_path):
    config = _trainjob_config(tmp_path)
    env = {**_trainjob_env(config, 1), "PET_NNODES": "3"}
    code = main(["--config", str(config)], container_env=env, probe=PROBE, prepare=lambda *a, **k: None)
    assert code == 2
    assert "PET_NNODES=3 but the spec has resources.nodes=2" in capsys.readouterr().err


def test_trainjob_worker_without_master_addr_names_both_variables(capsys, tmp_path):
    config = _trainjob_config(tmp_path)
    env = {k: v for k, v in _trainjob_env(config, 1).items() if k != "PET_MASTER_ADDR"}
    code = main(["--config", str(config)], container_env=env, probe=PROBE, prepare=lambda *a, **k: None)
    assert code == 2
    assert "PET_MASTER_ADDR (TrainJob)" in capsys.readouterr().err
