"""`environment`: CPU/memory limits from cgroup fixtures, /dev/shm sizing, env_for rules, redaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.entrypoint import environment as E
from launcher.entrypoint import ray_cluster as R

REPO = Path(__file__).resolve().parents[2]
SPEC = load_spec(REPO / "configs" / "grpo-exp3.yaml")
PROBE = E.ContainerProbe(cpus=16, memory_bytes=128 << 30, shm_bytes=16 << 30)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("1600000 100000", 16), ("250000 100000", 3), ("50000 100000", 1), ("max 100000", 7)],
)
def test_cgroup_v2_cpu_limit(tmp_path, cpu_max, expected):
    _write(tmp_path, "cpu.max", cpu_max)
    assert E.cpu_limit(tmp_path, fallback=7) == expected


@pytest.mark.parametrize("sub", ["cpu,cpuacct", "cpu"])
def test_cgroup_v1_cpu_limit(tmp_path, sub):
    _write(tmp_path, f"{sub}/cpu.cfs_quota_us", "400000")
    _write(tmp_path, f"{sub}/cpu.cfs_period_us", "100000")
    assert E.cpu_limit(tmp_path, fallback=7) == 4


def test_cgroup_v1_unlimited_and_no_cgroup_fall_back(tmp_path):
    assert E.cpu_limit(tmp_path / "none", fallback=7) == 7
    _write(tmp_path, "cpu/cpu.cfs_quota_us", "-1")
    _write(tmp_path, "cpu/cpu.cfs_period_us", "100000")
    assert E.cpu_limit(tmp_path, fallback=7) == 7
    assert E.cpu_limit(tmp_path / "none") == (os.cpu_count() or 1)


def test_memory_limit_v2_v1_and_unlimited(tmp_path):
    _write(tmp_path / "v2", "memory.max", str(128 << 30))
    assert E.memory_limit(tmp_path / "v2") == 128 << 30
    _write(tmp_path / "v2max", "memory.max", "max")
    assert E.memory_limit(tmp_path / "v2max") is None
    _write(tmp_path / "v1", "memory/memory.limit_in_bytes", str(16 << 30))
    assert E.memory_limit(tmp_path / "v1") == 16 << 30
    _write(tmp_path / "v1u", "memory/memory.limit_in_bytes", "9223372036854771712")
    assert E.memory_limit(tmp_path / "v1u") is None


def test_shm_size_uses_statvfs(tmp_path):
    st = os.statvfs(tmp_path)
    assert E.shm_size(tmp_path) == st.f_frsize * st.f_blocks
    assert E.shm_size(tmp_path / "missing") is None


def test_object_store_cap_is_half_of_shm_and_at_least_rays_minimum():
    assert E.object_store_cap(PROBE) == 8 << 30
    assert E.object_store_cap(E.ContainerProbe(1, None, 64 << 20)) == E.RAY_MIN_OBJECT_STORE  # the 64 MiB default shm
    assert E.object_store_cap(E.ContainerProbe(1, None, None)) is None


def test_env_for_single_node_defaults():
    env = E.env_for(SPEC, {"HOME": "/home/verl"}, role="single-node", probe=PROBE, attempt="20260101T000000Z")
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "RAY_COLOR_PREFIX": "0",
        "RAY_DEDUP_LOGS": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HOME": "/workspace/hf",
        "XDG_CACHE_HOME": "/home/verl/.cache",
        "TRITON_CACHE_DIR": "/home/verl/.cache/triton",
        "TOKENIZERS_PARALLELISM": "false",
        "VERL_FILE_LOGGER_PATH": f"/workspace/checkpoints/verl_grpo_gsm8k/{SPEC.job_name}/metrics/20260101T000000Z.jsonl",
        "RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES": str(8 << 30),
    }


def test_env_for_returns_only_changes_and_respects_pod_settings():
    pod = {"HOME": "/", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "true", "TRITON_CACHE_DIR": "/cache/t"}
    env = E.env_for(SPEC, pod, probe=PROBE)
    assert "PYTHONUNBUFFERED" not in env  # unchanged
    assert "TOKENIZERS_PARALLELISM" not in env and "TRITON_CACHE_DIR" not in env  # the pod's own values win
    assert env["XDG_CACHE_HOME"] == "/tmp/.cache"  # HOME=/ is not a writable home


def test_env_for_offline_sets_all_three_flags():
    spec = SPEC.model_copy(deep=True)
    spec.model.offline = True
    env = E.env_for(spec, {}, probe=PROBE)
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"


def test_env_for_no_file_logger_no_path():
    spec = SPEC.model_copy(deep=True)
    spec.trainer.logger = ["console"]
    assert "VERL_FILE_LOGGER_PATH" not in E.env_for(spec, {}, probe=PROBE)


def test_metrics_path_is_per_attempt():
    a, b = E.metrics_path(SPEC, "a1"), E.metrics_path(SPEC, "a2")
    assert a != b and a.startswith(SPEC.checkpoint_path + "/metrics/")


@pytest.mark.parametrize(
    ("role", "pod", "expected"),
    [
        ("single-node", {}, None),
        ("ray-job-driver", {}, None),
        ("ray-head", {}, "disabled"),
        ("ray-worker", {}, "disabled"),
        ("ray-worker", {"RAY_AUTH_TOKEN": "t"}, "token"),
    ],
)
def test_ray_auth_mode_by_role(role, pod, expected):
    assert E.env_for(SPEC, pod, role=role, probe=PROBE).get("RAY_AUTH_MODE") == expected


def test_ray_job_driver_leaves_the_object_store_to_the_cluster():
    assert "RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES" not in E.env_for(SPEC, {}, role="ray-job-driver", probe=PROBE)


def test_redaction():
    text = E.format_env({"HF_TOKEN": "x1", "WANDB_API_KEY": "x2", "DB_PASSWORD": "x3", "AWS_SECRET_ACCESS_KEY": "x4",
                         "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "/h"})
    assert "x1" not in text and "x2" not in text and "x3" not in text and "x4" not in text
    assert text.splitlines() == [
        "AWS_SECRET_ACCESS_KEY=<redacted>", "DB_PASSWORD=<redacted>", "HF_HOME=/h", "HF_TOKEN=<redacted>",
        "TOKENIZERS_PARALLELISM=false", "WANDB_API_KEY=<redacted>",
    ]


# --------------------------------------------------------------------------------------------------
# ray_cluster's pure parts


def test_topology_and_pod_names():
    env = {"RANK": "2", "PET_NODE_RANK": "2", "PET_NNODES": "3", "WORLD_SIZE": "3", "MASTER_ADDR": "j-1a2b3c4d-master-0"}
    topo = R.topology_from_env(env, nodes=3, job_name="fallback")
    assert topo.rank == 2 and not topo.is_head and topo.job_name == "j-1a2b3c4d"
    assert [topo.pod_name(r) for r in range(3)] == ["j-1a2b3c4d-master-0", "j-1a2b3c4d-worker-0", "j-1a2b3c4d-worker-1"]


def test_operator_env_maps_trainer_v2_variables():
    env = {"PET_NNODES": "3", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "1", "PET_MASTER_PORT": "29500",
           "PET_MASTER_ADDR": "j-1a2b3c4d-node-0-0.j-1a2b3c4d"}
    out = R.operator_env(env)
    assert out == {**env, "MASTER_ADDR": "j-1a2b3c4d-node-0-0.j-1a2b3c4d", "MASTER_PORT": "29500", "RANK": "1",
                   "WORLD_SIZE": "3"}
    # the training-operator's own variables are never changed (a PyTorchJob pod sets both kinds)
    pt = {"MASTER_ADDR": "j-master-0", "RANK": "2", "WORLD_SIZE": "3", "PET_NODE_RANK": "2", "PET_NNODES": "3"}
    assert R.operator_env(pt) == pt
    assert R.operator_env({}) == {}


def test_trainjob_topology_and_pod_names():
    env = {"PET_NODE_RANK": "2", "PET_NNODES": "3", "PET_MASTER_ADDR": "j-1a2b3c4d-node-0-0.j-1a2b3c4d",
           "POD_NAME": "j-1a2b3c4d-node-0-2-x7k2p"}
    topo = R.topology_from_env(env, nodes=3, job_name="fallback")
    assert topo.rank == 2 and topo.trainjob and topo.job_name == "j-1a2b3c4d"
    assert topo.master_addr == "j-1a2b3c4d-node-0-0.j-1a2b3c4d"
    assert [topo.pod_name(r) for r in range(3)] == ["j-1a2b3c4d-node-0-0", "j-1a2b3c4d-node-0-1", "j-1a2b3c4d-node-0-2"]
    assert R.missing_nodes(topo, [{"grpo_node_rank_0": 1, "GPU": 2}], 2) == [
        "j-1a2b3c4d-node-0-1 (rank 1)", "j-1a2b3c4d-node-0-2 (rank 2)"]


def test_trainjob_topology_refuses_a_rank_out_of_range():
    from launcher.errors import BadInput

    with pytest.raises(BadInput, match="rank 2: expected 0..1"):
        R.topology_from_env({"PET_NODE_RANK": "2", "PET_MASTER_ADDR": "j-node-0-0.j"}, nodes=2, job_name="j")


def test_missing_nodes_names_pods_and_gpu_shortfalls():
    topo = R.Topology(rank=0, nnodes=3, master_addr="j-master-0", job_name="j")
    nodes = [{"grpo_node_rank_0": 1, "GPU": 2}, {"grpo_node_rank_2": 1, "GPU": 1}]
    assert R.missing_nodes(topo, nodes, 2) == [
        "j-worker-0 (rank 1)", "j-worker-1 (rank 2, joined with 1 GPU(s), expected 2)",
    ]
    assert R.missing_nodes(topo, [*nodes, {"grpo_node_rank_1": 1, "GPU": 2}, {"grpo_node_rank_2": 1, "GPU": 2}], 2) == []


def test_bootstrap_settings_from_env_validate():
    s = R.BootstrapSettings.from_env({"LAUNCHER_NODE_WAIT_S": "20", "LAUNCHER_RAY_PORT": "7000", "POD_IP": "10.1.2.3"})
    assert s.node_wait_s == 20 and s.port == 7000 and s.node_ip == "10.1.2.3"
    from launcher.errors import BadInput

    with pytest.raises(BadInput, match="LAUNCHER_NODE_WAIT_S"):
        R.BootstrapSettings.from_env({"LAUNCHER_NODE_WAIT_S": "soon"})
