"""The evaluation job's merge step against verl's real checkpoint manager and model merger, on CPU.

A tiny random Qwen2ForCausalLM is wrapped in FSDP1 and saved by verl's own `FSDPCheckpointManager`
under `torchrun --nproc_per_node=2` with gloo (`_eval_ckpt_worker.py`): the exact layout a training
run leaves on the volume. The entrypoint's eval path then merges it with
`python -m verl.model_merger merge --backend fsdp ...` (no stand-in) and evaluates it, with verl's
trainer replaced by a small script (`LAUNCHER_CHILD_CMD`) that checks the model directory it is
given and writes a validation dump the way verl does. Nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.spec.load import dump_spec, load_spec
from launcher.entrypoint import eval as EV
from launcher.entrypoint.__main__ import main
from launcher.entrypoint.environment import ContainerProbe
from launcher.run.eval import eval_doc

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBE = ContainerProbe(cpus=2, memory_bytes=8 << 30, shm_bytes=1 << 30)

# Stand-in for verl's trainer: refuses a model directory without config.json (the merged one must be
# complete when verl starts), logs verl's step-0 validation line, and dumps generations like
# `_write_generations` (input, output, gts, score, step). The base model answers 1 of 3 questions,
# the checkpoint 2 of 3: distinct values, so the marker split is visible in the result.
FAKE_VERL = r'''
import json, os, sys
label, model, out = os.environ["LAUNCHER_EVAL_LABEL"], os.environ["LAUNCHER_EVAL_MODEL"], os.environ["LAUNCHER_EVAL_DATA_DIR"]
if label == "checkpoint" and not os.path.isfile(os.path.join(model, "config.json")):
    sys.exit("model dir incomplete: " + model)
right = {"base": 1, "checkpoint": 2}[label]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "0.jsonl"), "w") as f:
    for i in range(3):
        ok = i < right
        f.write(json.dumps({"input": f"q{i}", "output": "#### 7" if ok else "7.", "gts": "7",
                            "score": 1.0 if ok else 0.0, "step": 0}) + "\n")
acc = right / 3
print(f"step:0 - val-core/openai/gsm8k/acc/mean@1:np.float64({acc!r}) - val-aux/num_turns/min:np.int64(1)", flush=True)
'''


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A spec whose checkpoint_path holds a real verl FSDP checkpoint at global_step_3."""
    root = tmp_path_factory.mktemp("evalmerge")
    spec = load_spec(REPO / "configs" / "grpo-exp3.yaml",
                     [f"trainer.checkpoint_dir={root / 'ckpt'}", "storage.claim_name=ckpts"])
    ckpt = Path(spec.checkpoint_path)
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run([str(torchrun), "--nproc_per_node=2", "--master_port=29517",
                           str(HERE / "_eval_ckpt_worker.py"), str(ckpt)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    config = root / "spec.yaml"
    config.write_text(dump_spec(spec))
    return spec, config


def _run_entrypoint(config: Path, *args: str) -> int:
    fake = config.parent / "fake_verl.py"
    fake.write_text(FAKE_VERL)
    env = {"HOME": str(config.parent), "POD_NAME": "eval-0", "PATH": os.environ.get("PATH", ""),
           "LAUNCHER_CHILD_CMD": f"{sys.executable} {fake}", "LAUNCHER_ATTEMPT": "a1",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return main(["--config", str(config), "--mode", "eval", *args], container_env=env, probe=PROBE,
                prepare=lambda *a, **k: None, grace_s=5)


def test_entrypoint_merges_the_real_checkpoint_and_evaluates_base_then_checkpoint(trained, capfd):
    spec, config = trained
    assert EV.resolve_step(spec, "latest") == 3  # verl's latest_checkpointed_iteration.txt
    code = _run_entrypoint(config, "--baseline", "--checkpoint", "latest")
    out = capfd.readouterr()
    assert code == 0, out.err[-3000:]
    merged = EV.merged_dir(spec, 3)
    assert EV.is_merged(merged)
    assert "Saving model to" in out.out + out.err  # verl's merger ran (its own output)
    # no half-written merge left behind
    assert not list(merged.parent.glob(f"{EV.MERGED}.partial-*"))

    doc = eval_doc(out.out.splitlines())
    assert doc["base"]["model"] == spec.model.path and doc["base"]["step"] is None
    assert doc["checkpoint"]["model"] == str(merged) and doc["checkpoint"]["step"] == 3
    assert doc["base"]["metrics"]["val-core/openai/gsm8k/acc/mean@1"] == pytest.approx(1 / 3)
    assert doc["checkpoint"]["metrics"]["val-core/openai/gsm8k/acc/mean@1"] == pytest.approx(2 / 3)
    assert doc["base"]["status"] == 0 and doc["checkpoint"]["status"] == 0
    qb, qc = doc["base"]["questions"], doc["checkpoint"]["questions"]
    assert qb["ids_sha256"] == qc["ids_sha256"] and qb["n"] == 3
    assert sorted(qb["strict"]) == [0, 0, 1] and sorted(qc["strict"]) == [0, 1, 1]
    # verl's flexible scorer: "7." has no `#### N` (strict 0) and flexible also rejects "7." (§11 table)
    assert qc["flexible"] == qc["strict"]
    # base first, then checkpoint: "before", then "after"
    assert out.out.index("[eval] model=base") < out.out.index("[eval] model=checkpoint step=3")


def test_merged_weights_equal_the_trained_ones_and_load_in_transformers(trained, capfd):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    spec, config = trained
    merged = EV.merged_dir(spec, 3)
    if not EV.is_merged(merged):  # this test must not depend on the order tests run in
        assert _run_entrypoint(config, "--checkpoint", "3") == 0
    original = torch.load(Path(spec.checkpoint_path) / "original.pt", weights_only=True)
    weights: dict = {}
    for f in merged.glob("*.safetensors"):
        weights.update(load_file(f))
    assert set(weights) == set(original)
    for key, value in original.items():
        # The merger writes bf16 (notes/verl.md §8.4): equal up to bf16 rounding of the fp32 originals.
        assert weights[key].dtype == torch.bfloat16
        torch.testing.assert_close(weights[key].float(), value.to(torch.bfloat16).float(), rtol=0, atol=0)
    model = AutoModelForCausalLM.from_pretrained(merged)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    for key, value in model.state_dict().items():
        if key in original:
            torch.testing.assert_close(value.float(), original[key].to(torch.bfloat16).float(), rtol=0, atol=0)


def test_second_eval_reuses_the_merge_and_a_newer_checkpoint_is_merged_again(trained, capfd):
    spec, _ = trained
    merged = EV.merged_dir(spec, 3)
    if not EV.is_merged(merged):
        pytest.fail("run with the other tests of this module: the merge fixture state is missing")
    calls = []
    logs: list[str] = []

    def refuse(argv, env, *, name, cwd=None):
        calls.append(argv)
        return 1

    assert EV.ensure_merged(spec, 3, env={}, run=refuse, log=logs.append) == 0
    assert calls == [] and "merged model present" in logs[-1]
    # Re-trained into the same directory: a shard newer than the merge means the merge is stale.
    shard = next(EV.actor_dir(spec, 3).glob("model_world_size_*_rank_0.pt"))
    later = (merged / "config.json").stat().st_mtime + 10
    os.utime(shard, (later, later))
    backup = merged.with_name("backup")
    shutil.copytree(merged, backup)
    try:
        assert EV.ensure_merged(spec, 3, env={}, run=refuse, log=logs.append) == 1
        assert len(calls) == 1 and "--local_dir" in calls[0]
        assert not merged.exists()  # the stale merge is gone; a failed merge leaves nothing half-made
    finally:
        shutil.rmtree(merged, ignore_errors=True)
        backup.rename(merged)


def test_missing_checkpoint_is_bad_input(trained):
    from launcher.errors import LauncherError

    spec, _ = trained
    with pytest.raises(LauncherError) as exc:
        EV.ensure_merged(spec, 99, env={}, run=lambda *a, **k: 0, log=lambda m: None)
    assert exc.value.exit_code == 2 and "global_step_99" in str(exc.value)
