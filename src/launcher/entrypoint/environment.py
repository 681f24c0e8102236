"""What verl and Ray need in the environment of a training pod, as a pure function of the spec.

`env_for(spec, container_env, ...)` returns only the variables the entrypoint sets or changes; the
runner merges them over the container's environment for the child process. Everything it needs
from the machine (CPU limit, memory limit, /dev/shm size) comes in as a `ContainerProbe`, which
`probe_container()` reads from the cgroup filesystem and `os.statvfs('/dev/shm')`; both paths are
parameters so tests use fixture directories.

Choices (see also the module docstrings of `runner` and `ray_cluster`):
- Ray CPUs: the container's CPU limit (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`,
  else `os.cpu_count()`), rounded up; Ray's own detection counts the node's CPUs, not the pod's.
- Object store: Ray 2.60 caps its default at 95% of /dev/shm; NCCL and vLLM use /dev/shm too, so the
  cap is lowered to half of /dev/shm (never below Ray's 75 MiB minimum) through
  `RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES`, which `ray.init` and `ray start` both read.
- File logger: verl's FileLogger opens its path with mode "wb", so a retried pod would truncate the
  previous attempt's metrics (notes/verl.md §7). Each attempt writes
  `<checkpoint_path>/metrics/<attempt>.jsonl`; `attempt` is the UTC start time of the pod's
  entrypoint (or LAUNCHER_ATTEMPT), so a retry never reopens an earlier attempt's file.
- Ray auth (notes/verl.md §9.3): single-node and RayJob pods keep Ray's default (a local token, or
  whatever KubeRay configured). A multi-pod PyTorchJob cluster has no shared token file, so it uses
  `RAY_AUTH_TOKEN` when the pod has one (mode `token`) and otherwise sets `RAY_AUTH_MODE=disabled`:
  the GCS port is then reachable unauthenticated inside the pod network (restrict it with a
  NetworkPolicy).
- `TOKENIZERS_PARALLELISM=false`: the driver tokenises the dataset and then forks (datasets.map,
  Ray workers); Rust tokenizers warn or deadlock after a fork. A value already set in the pod wins.
- CPU training (`spec.cpu_training`, docker/verl-cpu/README.md §2), every role (Ray workers and vLLM's
  processes inherit the environment of the process that starts them): `VERL_USE_EXTERNAL_MODULES` names the
  image's verl CPU platform module and `VERL_PLATFORM=cpu` selects it (verl never detects it); `LD_PRELOAD`
  loads the venv's Intel OpenMP (`$VIRTUAL_ENV/lib/libiomp5.so`) for vLLM's CPU kernels, ahead of a preload
  the pod already has; `VLLM_CPU_KVCACHE_SPACE=1` (GiB: vLLM CPU sizes its KV cache from it, not from
  gpu_memory_utilization); `TORCHDYNAMO_DISABLE=1`, because vLLM CPU's sampler and verl's entropy are
  `torch.compile`d and Inductor needs a C++ compiler at run time, which the image does not have;
  `TQ_NUM_THREADS` = the pod's CPUs: verl's TransferQueue asks torch for 8 threads per transfer and warns on every
  one where the host has fewer cores (1,250 warnings in a 25-step run, enough console to make the kubelet
  rotate the log many times). The last three are defaults: a value already set in the pod (the spec's `env:`) wins.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping

from launcher.spec.contract import CPU_PLATFORM, CPU_PLATFORM_MODULE, DEFAULT_VENV, IOMP_LIBRARY
from launcher.spec.model import ExperimentSpec

Role = Literal["single-node", "ray-head", "ray-worker", "ray-job-driver"]

# Ray refuses an object store below 75 MiB (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES).
RAY_MIN_OBJECT_STORE = 75 * 1024 * 1024
# Share of /dev/shm given to the Ray object store; the rest stays for NCCL and vLLM.
SHM_OBJECT_STORE_FRACTION = 0.5

SECRET_NAME_RE = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)
# Names that match the pattern but are known settings, not secrets.
NOT_SECRET = frozenset({"TOKENIZERS_PARALLELISM"})
REDACTED = "<redacted>"


@dataclass(frozen=True)
class ContainerProbe:
    """What the container offers: CPU limit (whole CPUs), memory limit and /dev/shm size in bytes."""

    cpus: int
    memory_bytes: int | None
    shm_bytes: int | None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_limit(cgroup_root: str | Path = "/sys/fs/cgroup", *, fallback: int | None = None) -> int:
    """The container's CPU limit in whole CPUs (rounded up, at least 1).

    cgroup v2 `cpu.max` ("<quota> <period>" or "max <period>"), then cgroup v1
    `cpu[,cpuacct]/cpu.cfs_quota_us` / `cpu.cfs_period_us` (quota -1: unlimited), else
    `fallback` (default `os.cpu_count()`).
    """
    root = Path(cgroup_root)
    default = fallback if fallback is not None else (os.cpu_count() or 1)
    text = _read(root / "cpu.max")
    if text:
        parts = text.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                return max(1, math.ceil(int(parts[0]) / int(parts[1])))
            except (ValueError, ZeroDivisionError):
                pass
        return default
    for sub in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        quota = _read(root / sub / "cpu.cfs_quota_us")
        period = _read(root / sub / "cpu.cfs_period_us")
        if quota is None or period is None:
            continue
        try:
            q, p = int(quota), int(period)
        except ValueError:
            continue
        if q > 0 and p > 0:
            return max(1, math.ceil(q / p))
        return default
    return default


def memory_limit(cgroup_root: str | Path = "/sys/fs/cgroup") -> int | None:
    """The container's memory limit in bytes (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`), or None."""
    root = Path(cgroup_root)
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        text = _read(path)
        if text is None or text == "max":
            continue
        try:
            value = int(text)
        except ValueError:
            continue
        # cgroup v1 reports "unlimited" as a huge page-aligned number.
        if 0 < value < (1 << 60):
            return value
    return None


def shm_size(path: str | Path = "/dev/shm") -> int | None:
    """Total size of the filesystem at `path` (the pod's memory-backed /dev/shm), or None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def probe_container(cgroup_root: str | Path = "/sys/fs/cgroup", shm_path: str | Path = "/dev/shm") -> ContainerProbe:
    """Read CPU, memory and /dev/shm of the running container."""
    return ContainerProbe(cpus=cpu_limit(cgroup_root), memory_bytes=memory_limit(cgroup_root), shm_bytes=shm_size(shm_path))


def object_store_cap(probe: ContainerProbe) -> int | None:
    """Upper bound for Ray's object store: half of /dev/shm, at least Ray's minimum; None if unknown."""
    if not probe.shm_bytes:
        return None
    return max(RAY_MIN_OBJECT_STORE, int(probe.shm_bytes * SHM_OBJECT_STORE_FRACTION))


def metrics_path(spec: ExperimentSpec, attempt: str) -> str:
    """Per-attempt FileLogger path on the storage volume (verl truncates an existing file)."""
    return f"{spec.checkpoint_path}/metrics/{attempt}.jsonl"


def _cache_root(container_env: Mapping[str, str]) -> str:
    home = container_env.get("HOME", "")
    return f"{home.rstrip('/')}/.cache" if home and home != "/" else "/tmp/.cache"


def env_for(
    spec: ExperimentSpec,
    container_env: Mapping[str, str],
    *,
    role: Role = "single-node",
    probe: ContainerProbe | None = None,
    attempt: str = "attempt",
) -> dict[str, str]:
    """The variables to set (or change) for verl / Ray in this pod; pure given `probe`.

    `container_env` is the pod's environment (only read: caches honour an existing HOME and
    user-set cache paths, auth honours RAY_AUTH_TOKEN/RAY_AUTH_MODE). Returns only keys whose value
    differs from `container_env`.
    """
    probe = probe or ContainerProbe(cpus=1, memory_bytes=None, shm_bytes=None)
    cache = container_env.get("XDG_CACHE_HOME") or _cache_root(container_env)
    env: dict[str, str] = {
        "PYTHONUNBUFFERED": "1",
        # verl's console metric lines must reach the pod log without ANSI codes or Ray's de-duplication.
        "RAY_COLOR_PREFIX": "0",
        "RAY_DEDUP_LOGS": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HOME": spec.model.cache_dir,
        "XDG_CACHE_HOME": cache,
        "TRITON_CACHE_DIR": container_env.get("TRITON_CACHE_DIR") or f"{cache}/triton",
        "TOKENIZERS_PARALLELISM": container_env.get("TOKENIZERS_PARALLELISM") or "false",
    }
    if spec.model.offline:
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if spec.cpu_training:
        env.update(cpu_training_env(container_env, probe.cpus))
    if "file" in spec.trainer.logger:
        # Every role: verl's TaskRunner actor (which opens the file) may be placed on any Ray node,
        # and a raylet's workers inherit the environment of the `ray start` that launched it.
        env["VERL_FILE_LOGGER_PATH"] = metrics_path(spec, attempt)
    cap = object_store_cap(probe)
    if cap is not None and role != "ray-job-driver":
        env["RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES"] = str(cap)
    if role in ("ray-head", "ray-worker"):
        if container_env.get("RAY_AUTH_TOKEN"):
            env["RAY_AUTH_MODE"] = "token"
        else:
            env["RAY_AUTH_MODE"] = "disabled"
    return {k: v for k, v in env.items() if container_env.get(k) != v}


def cpu_training_env(container_env: Mapping[str, str], cpus: int = 1) -> dict[str, str]:
    """What verl's GRPO trainer needs on CPU-only pods in the CPU image (see the module docstring); `cpus`: the pod's."""
    venv = (container_env.get("VIRTUAL_ENV") or DEFAULT_VENV).rstrip("/")
    iomp = f"{venv}/{IOMP_LIBRARY}"
    preload = [p for p in re.split(r"[:\s]+", container_env.get("LD_PRELOAD", "")) if p]
    return {
        "VERL_USE_EXTERNAL_MODULES": CPU_PLATFORM_MODULE,
        "VERL_PLATFORM": CPU_PLATFORM,
        "LD_PRELOAD": ":".join([iomp, *(p for p in preload if p != iomp)]),
        "VLLM_CPU_KVCACHE_SPACE": container_env.get("VLLM_CPU_KVCACHE_SPACE") or "1",
        "TORCHDYNAMO_DISABLE": container_env.get("TORCHDYNAMO_DISABLE") or "1",
        "TQ_NUM_THREADS": container_env.get("TQ_NUM_THREADS") or str(max(1, cpus)),
    }


def runtime_env_overrides(env: Mapping[str, str]) -> list[str]:
    """Hydra overrides putting `env` into the Ray job's runtime_env: verl merges `ray_kwargs.ray_init.runtime_env`
    over its own and passes it to `ray.init`, so every actor of the job, on any node, gets these variables. How
    CPU training's environment reaches a RayJob's worker pods, whose raylets KubeRay starts without the
    entrypoint (as `entrypoint.tracking` carries the run ids)."""
    from launcher.spec.verl import hydra_value

    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={hydra_value(v)}" for k, v in env.items()]


def is_secret_name(name: str) -> bool:
    """Variables never printed: HF_TOKEN, WANDB_API_KEY and anything named *TOKEN*/*KEY*/*SECRET*/*PASSWORD*."""
    return name.upper() not in NOT_SECRET and bool(SECRET_NAME_RE.search(name))


def format_env(env: Mapping[str, str]) -> str:
    """`KEY=VALUE` lines, sorted, with secret values replaced by `<redacted>`."""
    return "\n".join(f"{k}={REDACTED if is_secret_name(k) else v}" for k, v in sorted(env.items()))
