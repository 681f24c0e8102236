"""CPU training in the pod (configs/grpo-exp3-cpu.yaml): `env_for`'s CPU variables, the command each role runs
(`--dry-run`), and the resources every raylet declares."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from launcher.entrypoint import environment as E
from launcher.entrypoint.__main__ import VERL_COMMAND, main, raylet_resources
from launcher.spec.load import load_spec
from launcher.spec.names import RESERVED_ENV
from launcher.spec.verl import verl_overrides

REPO = Path(__file__).resolve().parents[2]
EXP3_CPU = REPO / "configs" / "grpo-exp3-cpu.yaml"
CPU = load_spec(EXP3_CPU)
PROBE = E.ContainerProbe(cpus=2, memory_bytes=12 << 30, shm_bytes=2 << 30)  # the config's 1500m pod, rounded up
POD_ENV = {"HOME": "/home/verl", "POD_NAME": "x", "PATH": "/usr/bin", "VIRTUAL_ENV": "/opt/venv"}
CPU_ENV = {
    "VERL_USE_EXTERNAL_MODULES": "grpo_verl_cpu.platform",
    "VERL_PLATFORM": "cpu",
    "LD_PRELOAD": "/opt/venv/lib/libiomp5.so",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TORCHDYNAMO_DISABLE": "1",
    "TQ_NUM_THREADS": "2",  # the pod's CPUs (PROBE): TransferQueue's 8 would warn on every transfer
}
ROLES = ("single-node", "ray-head", "ray-worker", "ray-job-driver")


# --------------------------------------------------------------------------------------------------
# env_for


@pytest.mark.parametrize("role", ROLES)
def test_env_for_sets_the_cpu_platform_in_every_role(role):
    env = E.env_for(CPU, POD_ENV, role=role, probe=PROBE)
    assert {k: env[k] for k in CPU_ENV} == CPU_ENV


@pytest.mark.parametrize("config", ["grpo-exp3.yaml", "smoke-cpu.yaml"])
def test_no_cpu_variables_without_cpu_training(config):
    """GPU training, and the smoke workload on CPU pods (no trainer), get none of them."""
    spec = load_spec(REPO / "configs" / config)
    for role in ROLES:
        assert not set(E.env_for(spec, POD_ENV, role=role, probe=PROBE)) & set(CPU_ENV)


def test_intel_openmp_comes_from_the_pods_venv():
    assert E.cpu_training_env({"VIRTUAL_ENV": "/srv/env/"})["LD_PRELOAD"] == "/srv/env/lib/libiomp5.so"
    assert E.cpu_training_env({})["LD_PRELOAD"] == "/opt/venv/lib/libiomp5.so"  # the image's default


def test_a_preload_the_pod_has_is_kept_after_intel_openmp():
    env = {"VIRTUAL_ENV": "/opt/venv", "LD_PRELOAD": "/usr/lib/libtcmalloc.so /opt/venv/lib/libiomp5.so"}
    assert E.cpu_training_env(env)["LD_PRELOAD"] == "/opt/venv/lib/libiomp5.so:/usr/lib/libtcmalloc.so"
    # already in place: nothing to change, so env_for leaves it out of its delta
    env = {**POD_ENV, "LD_PRELOAD": "/opt/venv/lib/libiomp5.so"}
    assert "LD_PRELOAD" not in E.env_for(CPU, env, probe=PROBE)


def test_kv_cache_and_dynamo_are_defaults_the_spec_env_may_change():
    env = {**POD_ENV, "VLLM_CPU_KVCACHE_SPACE": "4", "TORCHDYNAMO_DISABLE": "0"}
    delta = E.env_for(CPU, env, probe=PROBE)
    assert "VLLM_CPU_KVCACHE_SPACE" not in delta and "TORCHDYNAMO_DISABLE" not in delta
    assert E.cpu_training_env(env)["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert E.cpu_training_env({"TQ_NUM_THREADS": "6"}, cpus=2)["TQ_NUM_THREADS"] == "6"
    assert E.cpu_training_env({}, cpus=0)["TQ_NUM_THREADS"] == "1"
    # ...and so they are not reserved: `env:` may set them; the platform selection is the launcher's own
    load_spec(EXP3_CPU, ["env=[{name: VLLM_CPU_KVCACHE_SPACE, value: '4'}, {name: LD_PRELOAD, value: /x.so}]"])
    assert {"VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM"} <= RESERVED_ENV
    assert not {"LD_PRELOAD", "VLLM_CPU_KVCACHE_SPACE", "TORCHDYNAMO_DISABLE"} & RESERVED_ENV


def test_runtime_env_overrides_quote_for_hydra():
    assert E.runtime_env_overrides({"VERL_PLATFORM": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}) == [
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM=cpu",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE='1'",  # a string, not Hydra's int
    ]


# --------------------------------------------------------------------------------------------------
# what each role runs (--dry-run)


def _dry(capsys, config: Path, env: dict) -> tuple[list[str], list[str], dict[str, str]]:
    code = main(["--config", str(config), "--dry-run"], container_env=env, probe=PROBE,
                prepare=lambda *a, **k: pytest.fail("dry-run must not prepare data"))
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    argv = shlex.split(lines[lines.index("# command") + 1])
    start = lines.index("# environment (set or changed)") + 1
    env_out = {}
    for line in lines[start:]:
        if line.startswith("#"):
            break
        key, _, value = line.partition("=")
        env_out[key] = value
    return lines, argv, env_out


def test_single_node_pod_runs_the_shared_list_with_16_cpus_and_a_gpu(capsys):
    lines, argv, env = _dry(capsys, EXP3_CPU, POD_ENV)
    assert lines[0] == "# role: single-node"
    assert argv == [*VERL_COMMAND, *verl_overrides(CPU, ray_num_cpus=2)]
    assert "ray_kwargs.ray_init.num_cpus=16" in argv and "+ray_kwargs.ray_init.num_gpus=1" in argv
    assert {k: env[k] for k in CPU_ENV} == CPU_ENV
    assert env["HF_HUB_OFFLINE"] == "1"  # model.offline: the builtin model needs no hub


def _config(tmp_path: Path, **raw) -> Path:
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump({"base": str(EXP3_CPU), **raw}))
    return path


def test_multinode_raylets_declare_16_cpus_and_one_gpu(capsys, tmp_path):
    config = _config(tmp_path, resources={"nodes": 2})
    job = "grpo-exp3-cpu-1a2b3c4d"
    op = {**POD_ENV, "MASTER_ADDR": f"{job}-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2",
          "PET_NPROC_PER_NODE": "1", "PET_NNODES": "2"}
    for rank in (0, 1):
        lines, argv, env = _dry(capsys, config, {**op, "RANK": str(rank), "PET_NODE_RANK": str(rank)})
        assert lines[0] == ("# role: ray-head" if rank == 0 else "# role: ray-worker")
        ray = shlex.split(next(line for line in lines if line.startswith("# ray: ")).removeprefix("# ray: "))
        assert "--num-cpus=16" in ray and "--num-gpus=1" in ray
        assert {k: env[k] for k in CPU_ENV} == CPU_ENV  # `ray start` passes them to every worker process
    # the head's verl attaches: no ray.init resources, one trainer per pod
    assert "+ray_kwargs.ray_init.num_gpus=1" not in " ".join(argv)
    assert raylet_resources(load_spec(config), 2) == (16, 1) and raylet_resources(load_spec(config), 32) == (32, 1)
    gpu = load_spec(REPO / "configs" / "grpo-exp3.yaml")
    assert raylet_resources(gpu, 16) == (16, 2)
    assert raylet_resources(load_spec(REPO / "configs" / "smoke-cpu.yaml"), 1) == (1, 0)


def test_rayjob_driver_carries_the_cpu_platform_to_kuberays_workers(capsys, tmp_path):
    """KubeRay starts the worker pods' raylets without the entrypoint: the job's runtime_env carries the variables."""
    config = _config(tmp_path, backend="rayjob")
    lines, argv, env = _dry(capsys, config, {**POD_ENV, "RAY_ADDRESS": "10.0.0.1:6379"})
    assert lines[0] == "# role: ray-job-driver"
    spec = load_spec(config)
    carried = [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={'%r' % v if v.isdigit() else v}" for k, v in CPU_ENV.items()]
    assert argv == [*VERL_COMMAND, *verl_overrides(spec), *carried]
    assert not [a for a in argv if a.startswith(("+ray_kwargs.ray_init.num_gpus", "ray_kwargs.ray_init.num_cpus"))]
    assert {k: env[k] for k in CPU_ENV} == CPU_ENV  # and the driver's own process has them
