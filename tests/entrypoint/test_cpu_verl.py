"""The CPU-run modules against the real libraries, without vLLM: the verl platform module `verl_cpu`,
the reward `cpu_reward` with verl's own GSM8K score, and the built-in model `tiny_model`
(transformers + tokenizers). vLLM itself is replaced by a stand-in module where its function is wrapped.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
# where grpo_verl_cpu lives (and the launcher, for gsm8k): what a CPU pod will have on its path
CPU_PATH = f"{REPO / 'docker' / 'verl-cpu'}:{REPO / 'src'}"
sys.path.insert(0, str(REPO / "docker" / "verl-cpu"))  # grpo_verl_cpu is not part of the launcher package


# --------------------------------------------------------------------------------------------------
# cpu_reward with verl's GSM8K score


@pytest.mark.parametrize(
    ("response", "truth", "score", "acc"),
    [
        ("She has 14+9=23 apples.\n#### 23", "23", 1.0, 1.0),
        ("#### 3,600", "3600", 1.0, 1.0),  # verl strips the comma
        ("#### 24", "23", 0.5 * 2 / 6, 0.0),  # wrong number: shaped (####24 -> 2 digits of 6)
        ("the answer is 23", "23", 0.5 * 2 / 13, 0.0),  # right number, no "####": verl's strict rule says 0
        ("", "23", 0.0, 0.0),
        ("Ġword soup", "23", 0.0, 0.0),
    ],
)
def test_compute_score_table(response, truth, score, acc):
    from verl.utils.reward_score import gsm8k

    from grpo_verl_cpu.reward import compute_score

    out = compute_score("openai/gsm8k", response, truth, extra_info={"split": "train", "index": 0})
    assert out == {"score": pytest.approx(score), "acc": acc}
    assert out["acc"] == gsm8k.compute_score(response, truth)  # acc is verl's unshaped score
    assert compute_score("openai/gsm8k", response, truth) == out  # deterministic


# --------------------------------------------------------------------------------------------------
# verl_cpu: registration, the device module, gloo, live weights


@pytest.fixture
def verl_cpu():
    return importlib.import_module("grpo_verl_cpu.platform")


def test_registers_cpu_platform_without_selecting_it(verl_cpu):
    from verl.plugin.platform import PlatformRegistry

    assert PlatformRegistry.get("cpu") is verl_cpu.CpuPlatform
    # never auto-detected: only VERL_PLATFORM=cpu picks it
    assert verl_cpu.CpuPlatform.is_platform_available(verl_cpu.CpuPlatform.__new__(verl_cpu.CpuPlatform), True) is False


def test_import_has_no_side_effects_beyond_registration():
    """A fresh interpreter with verl already imported (verl's own import sets variables): importing the
    module changes neither torch.distributed, the import system nor the environment, and imports no vLLM."""
    code = (
        "import os, sys, verl, torch.distributed as d; before = (d.init_process_group, list(sys.meta_path), dict(os.environ));"
        "import grpo_verl_cpu.platform as m;"
        "assert d.init_process_group is before[0]; assert sys.meta_path == before[1];"
        "assert dict(os.environ) == before[2]; assert 'vllm' not in sys.modules; print('clean')"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("VERL_PLATFORM", "LAUNCHER_VLLM_CPU_LIVE_WEIGHTS")}
    env["PYTHONPATH"] = CPU_PATH
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("clean")


def test_platform_facts(verl_cpu, monkeypatch):
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "unset")  # recorded, so the platform's setdefault is undone
    monkeypatch.delenv("VERL_ENGINE_DEVICE")
    original = __import__("torch").distributed.init_process_group
    try:
        p = verl_cpu.CpuPlatform()
        assert (p.device_name, p.vendor_name, p.communication_backend_name(), p.ray_resource_name()) == (
            "cpu", "nvidia", "gloo", "GPU")
        assert p.is_ipc_supported() is False
        assert p.current_device() == "cpu"
        assert p.ray_resource_options(1) == {"num_gpus": 1}
        assert p.rollout_env_vars() == {verl_cpu.LIVE_WEIGHTS_ENV: "1"}
        assert __import__("os").environ["VERL_ENGINE_DEVICE"] == "cuda"
        with p.nvtx_range("x"):
            pass
    finally:
        __import__("torch").distributed.init_process_group = original


def test_fsdp_engine_is_found(verl_cpu, monkeypatch):
    """verl's engine lookup with the cpu platform and VERL_ENGINE_DEVICE=cuda finds the FSDP engine."""
    import verl.plugin.platform.platform_manager as pm
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    monkeypatch.setattr(pm, "_current_platform", verl_cpu.CpuPlatform.__new__(verl_cpu.CpuPlatform))
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cuda")
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead
    monkeypatch.delenv("VERL_ENGINE_DEVICE")
    with pytest.raises(ValueError, match="No engine registered for device='cpu'"):
        EngineRegistry.get_engine_cls("language_model", "fsdp2")


def test_device_module_stand_ins(verl_cpu):
    import torch

    dev = verl_cpu.DEVICE_MODULE
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "synchronize"):
        assert getattr(dev, name)() is None
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        assert getattr(dev, name)() == 0
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    assert dev.current_device() == "cpu" and dev.is_available() and dev.get_device_name() == "CPU"
    assert dev.Stream is torch.cpu.Stream  # everything else comes from torch.cpu


@pytest.mark.parametrize(
    ("backend", "expected"),
    [("cpu:gloo,cpu:gloo", "gloo"), ("cpu:gloo", "cpu:gloo"), ("gloo", "gloo"),
     ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"), (None, None)],
)
def test_plain_gloo(verl_cpu, backend, expected):
    assert verl_cpu.plain_gloo(backend) == expected


def test_init_process_group_with_verls_backend_string(verl_cpu, tmp_path):
    """What verl's initialize_global_process_group_ray does on CPU, in a fresh one-rank process."""
    code = (
        "import os; os.environ.update(VERL_PLATFORM='cpu', VERL_USE_EXTERNAL_MODULES='grpo_verl_cpu.platform',"
        "MASTER_ADDR='127.0.0.1', MASTER_PORT='0', RANK='0', WORLD_SIZE='1');"
        "import torch.distributed as d; from verl.utils.distributed import initialize_global_process_group_ray;"
        f"initialize_global_process_group_ray(); print(d.get_backend())"
    )
    env = dict(__import__("os").environ, PYTHONPATH=CPU_PATH)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "gloo"


def _fake_vllm_utils():
    calls = []
    mod = types.ModuleType("fake_vllm_layers_utils")

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        calls.append(remove_weight)
        layer.cpu_linear = "vllm's own"
        if remove_weight:
            layer.weight = None

    mod.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
    return mod, calls


def test_keep_live_weights(verl_cpu):
    import torch

    mod, calls = _fake_vllm_utils()
    verl_cpu.keep_live_weights(mod)
    verl_cpu.keep_live_weights(mod)  # once only
    linear = torch.nn.Linear(4, 3)
    mod.dispatch_cpu_unquantized_gemm(linear, remove_weight=True)
    assert linear.cpu_linear is torch.nn.functional.linear and linear.weight.shape == (3, 4) and calls == []
    with torch.no_grad():
        linear.weight.fill_(1.0)  # what verl's weight sync does: the next forward sees it
    x = torch.ones(2, 4)
    assert torch.equal(linear.cpu_linear(x, linear.weight, None), torch.full((2, 3), 4.0))
    conv = torch.nn.Conv1d(2, 2, 3)  # not 2-D: vLLM's own dispatch
    mod.dispatch_cpu_unquantized_gemm(conv, remove_weight=False)
    assert conv.cpu_linear == "vllm's own" and calls == [False]


def test_live_weights_hook_patches_on_import(verl_cpu, tmp_path, monkeypatch):
    """With the module not yet imported, the meta-path hook wraps the function right after it executes."""
    pkg = tmp_path / "vllm" / "model_executor" / "layers"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "model_executor", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "utils.py").write_text("def dispatch_cpu_unquantized_gemm(layer, remove_weight):\n    layer.cpu_linear = 'own'\n")
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    meta_path = list(sys.meta_path)
    try:
        verl_cpu.install_live_weights()
        verl_cpu.install_live_weights()  # one hook only
        assert sum(isinstance(f, verl_cpu._PatchOnImport) for f in sys.meta_path) == 1
        utils = importlib.import_module("vllm.model_executor.layers.utils")
        assert utils.dispatch_cpu_unquantized_gemm._launcher_live_weights is True
    finally:
        sys.meta_path[:] = meta_path
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


# --------------------------------------------------------------------------------------------------
# tiny_model


def test_tiny_model_is_deterministic(tmp_path):
    from grpo_verl_cpu import tiny_model as TM

    a = TM.build(tmp_path / "a", seed=0)
    b = TM.build(tmp_path / "b", seed=0)
    c = TM.build(tmp_path / "c", seed=1)
    assert a["sha256"] == b["sha256"] == TM.tree_sha256(tmp_path / "a")
    assert c["sha256"] != a["sha256"]
    for name in a["files"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a["parameters"] < 1_000_000 and a["vocab_size"] <= TM.VOCAB_SIZE


def test_tiny_model_loads_as_qwen2_with_chatml(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from grpo_verl_cpu import tiny_model as TM
    from launcher.entrypoint.gsm8k import INSTRUCTION

    TM.build(tmp_path, seed=0)
    cfg = AutoConfig.from_pretrained(tmp_path)
    assert (cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim) == (
        "qwen2", 128, 2, 1, 64)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok.eos_token == "<|im_end|>" and cfg.eos_token_id == tok.eos_token_id
    assert tok.pad_token == "<|endoftext|>"
    text = tok.apply_chat_template([{"role": "user", "content": "Ana has 14 pencils. " + INSTRUCTION}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == f"<|im_start|>user\nAna has 14 pencils. {INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
    # the tokenizer transformers rebuilds for qwen2 is the one trained here, digit by digit as Qwen2's
    raw = TM.train_tokenizer(0)
    assert tok(text)["input_ids"] == raw(text)["input_ids"]
    assert "14" not in tok.tokenize(text) and tok.decode(tok(text)["input_ids"]) == text
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.float32
    out = model.generate(torch.tensor([tok(text)["input_ids"]]), max_new_tokens=4, do_sample=False)
    assert out.shape[1] == len(tok(text)["input_ids"]) + 4 or tok.eos_token_id in out[0].tolist()


def test_tiny_model_cli_prints_what_it_made(tmp_path):
    env = dict(__import__("os").environ, PYTHONPATH=CPU_PATH)
    out = subprocess.run([sys.executable, "-m", "grpo_verl_cpu.tiny_model", str(tmp_path / "m"), "--seed", "0"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    from grpo_verl_cpu import tiny_model as TM

    assert f"sha256 {TM.tree_sha256(tmp_path / 'm')}" in out.stdout
    assert "Qwen2ForCausalLM" in out.stdout and "vocab" in out.stdout and "parameters" in out.stdout
