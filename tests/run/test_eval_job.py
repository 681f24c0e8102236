"""`launcher eval`: the rendered evaluation job (names, labels, command, CRD schemas), its arguments,
the entrypoint's eval mode (dry run, marker lines, failures), and the checkpoint defaults training
relies on (a checkpoint at the last step; no silent resume)."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from crd_schema import schema_errors
from launcher.spec import names as L
from launcher.cli.main import main as cli
from launcher.cli.commands.eval import entry_args, models_key
from launcher.spec.load import dump_spec, load_spec
from launcher.entrypoint import eval as EV
from launcher.entrypoint.__main__ import main as entry
from launcher.entrypoint.environment import ContainerProbe
from launcher.run.eval import eval_doc
from launcher.render.manifests import render
from launcher.spec.names import JOB_NAME_MAX
from launcher.spec.verl import verl_overrides

REPO = Path(__file__).resolve().parents[2]
EXP3 = REPO / "configs" / "grpo-exp3.yaml"
PVC = ["--set", "storage.claim_name=grpo-ckpt"]
PROBE = ContainerProbe(cpus=4, memory_bytes=8 << 30, shm_bytes=1 << 30)


def _render(capsys, *args) -> list[dict]:
    assert cli(["eval", str(EXP3), *args, "--dry-run"]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def _job(objs):
    return next(o for o in objs if o["kind"] in ("PyTorchJob", "RayJob"))


def _command(job) -> list[str]:
    if job["kind"] == "RayJob":
        return shlex.split(job["spec"]["entrypoint"])
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
@pytest.mark.parametrize("what", [["--baseline"], ["--checkpoint", "25", *PVC], ["--baseline", *PVC], PVC])
def test_eval_job_validates_against_the_real_crds(capsys, backend, what):
    objs = _render(capsys, "--backend", backend, *what)
    for obj in objs:
        assert schema_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
        assert obj["metadata"]["labels"][L.COMPONENT_LABEL] == "eval"
    job = _job(objs)
    name = job["metadata"]["name"]
    assert name.startswith("grpo-exp3-eval-") and len(name) <= JOB_NAME_MAX
    cmd = _command(job)
    if cmd[:2] == ["/usr/bin/tini", "--"]:  # PyTorchJob pods keep tini as PID 1 (render.POD_COMMAND)
        cmd = cmd[2:]
    assert cmd[:5] == ["python3", "-m", "launcher.entrypoint", "--config", "/etc/grpo/spec.yaml"]
    assert cmd[5:7] == ["--mode", "eval"]
    if what == PVC:  # neither flag: the latest checkpoint
        assert cmd[7:] == ["--checkpoint", "latest"]


def test_eval_job_requests_the_same_gpus_and_image_as_training(capsys):
    train = _job(render(load_spec(EXP3, ["storage.claim_name=grpo-ckpt"])))
    ev = _job(_render(capsys, "--checkpoint", "25", *PVC))
    t_pod = train["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    e_pod = ev["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    for key in ("resources", "image", "volumeMounts"):
        assert t_pod["containers"][0][key] == e_pod["containers"][0][key], key
    assert t_pod["nodeSelector"] == e_pod["nodeSelector"] and t_pod["volumes"][2] == e_pod["volumes"][2]


def test_each_set_of_models_is_its_own_run_and_names_fit_the_budget(capsys):
    spec = load_spec(EXP3)
    names = {L.eval_job_name(spec, models_key(b, c)) for b, c in
             [(True, None), (False, "25"), (False, "latest"), (True, "25"), (True, "latest")]}
    assert len(names) == 5
    # Deterministic, so a resubmit attaches: the documented rule `<name>-eval-<hash>`, the hash being the
    # first 8 hex digits of sha256("<config hash>|<models>"), written out here rather than called.
    digest = hashlib.sha256(f"{spec.config_hash()}|base".encode()).hexdigest()[:8]
    assert L.eval_job_name(load_spec(EXP3), "base") == f"grpo-exp3-eval-{digest}"
    assert [models_key(True, None), models_key(False, "25"), models_key(True, "latest")] == [
        "base", "checkpoint=25", "base+checkpoint=latest"]
    objs = _render(capsys, "--baseline")  # the job `launcher eval --baseline` renders carries that name
    assert _job(objs)["metadata"]["name"] == f"grpo-exp3-eval-{digest}"
    long = load_spec(EXP3, ["name=" + "a" * 38])
    name = L.eval_job_name(long, "base")
    assert len(name) == JOB_NAME_MAX and "-eval-" in name
    assert entry_args(True, "latest") == ("--mode", "eval", "--baseline", "--checkpoint", "latest")


@pytest.mark.parametrize("args,message", [
    (["--checkpoint", "25"], "storage.claim_name is null"),
    (["--checkpoint", "0", *PVC], "step number >= 1"),
    (["--checkpoint", "x", *PVC], "step number >= 1"),
    (["--checkpoint", "25", *PVC, "--set", "trainer.save_freq=-1"], "saved no checkpoint"),
])
def test_impossible_evaluations_are_bad_input(capsys, args, message):
    assert cli(["eval", str(EXP3), *args, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# The entrypoint in eval mode


def _config(tmp_path, *sets) -> tuple[Path, object]:
    spec = load_spec(EXP3, [f"trainer.checkpoint_dir={tmp_path / 'ckpt'}", *sets])
    path = tmp_path / "spec.yaml"
    path.write_text(dump_spec(spec))
    return path, spec


def test_dry_run_prints_the_merge_and_one_verl_command_per_model(tmp_path, capsys):
    config, spec = _config(tmp_path)
    env = {"HOME": "/home/verl", "POD_NAME": "x", "PATH": "/usr/bin"}
    code = entry(["--config", str(config), "--dry-run", "--mode", "eval", "--baseline", "--checkpoint", "25"],
                 container_env=env, probe=PROBE, prepare=lambda *a, **k: pytest.fail("dry run prepares nothing"))
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    plan = out[out.index("# eval plan") + 1:]
    # base first ("before"), then the merge and the checkpoint ("after")
    assert plan[0] == "# verl (model=base)" and plan[2].startswith("# merge (unless ")
    assert plan[4] == "# verl (model=checkpoint)" and len(plan) == 6
    merge = shlex.split(plan[3])
    assert merge[1:] == ["-m", "verl.model_merger", "merge", "--backend", "fsdp",
                         "--local_dir", f"{spec.checkpoint_path}/global_step_25/actor",
                         "--target_dir", f"{spec.checkpoint_path}/global_step_25/actor/hf_merged"]
    base = shlex.split(plan[1])
    root = f"{spec.checkpoint_path}/eval/<attempt>/base"
    assert base == ["python3", "-m", "verl.trainer.main_ppo",
                    *verl_overrides(spec, mode="eval", model=spec.model.path, experiment_name="grpo-exp3-eval-base",
                                    checkpoint_dir=f"{root}/ckpt", ray_num_cpus=4),
                    f"trainer.validation_data_dir='{root}/generations'"]
    # the same command, written out where it differs from training: validation only, nothing saved,
    # the base model, its own experiment name and directories, Ray pinned to the probed CPUs
    for override in ("trainer.val_only=True", "trainer.val_before_train=True", "trainer.save_freq=-1",
                     "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
                     "trainer.experiment_name=grpo-exp3-eval-base",
                     f"trainer.default_local_dir='{root}/ckpt'",  # quoted for Hydra: the path holds < >
                     "data.val_files=/workspace/data/gsm8k/test.parquet", "ray_kwargs.ray_init.num_cpus=4"):
        assert override in base, override
    assert "trainer.save_freq=25" not in base  # training's value (save at the last step) is not kept
    ckpt = shlex.split(plan[-1])
    assert f"actor_rollout_ref.model.path={spec.checkpoint_path}/global_step_25/actor/hf_merged" in ckpt
    assert "trainer.experiment_name=grpo-exp3-eval-checkpoint-step25" in ckpt


@pytest.mark.parametrize("args,message", [
    (["--baseline"], "need --mode eval"),
    (["--mode", "eval", "--model", "/m", "--baseline"], "exclude --model"),
    (["--mode", "eval", "--checkpoint", "abc"], "step number or 'latest'"),
    (["--mode", "eval", "--checkpoint", "latest"], "latest_checkpointed_iteration.txt"),
])
def test_entrypoint_refuses_bad_eval_arguments(tmp_path, capsys, args, message):
    config, _ = _config(tmp_path)
    env = {"HOME": str(tmp_path), "POD_NAME": "x", "PATH": "/usr/bin", "LAUNCHER_CHILD_CMD": "false"}
    code = entry(["--config", str(config), *args], container_env=env, probe=PROBE, prepare=lambda *a, **k: None)
    assert code == 2
    assert message in capsys.readouterr().err


FAKE_VERL = r'''
import json, os, sys
label = os.environ["LAUNCHER_EVAL_LABEL"]
if label == "base" and os.environ.get("FAIL_BASE"):
    sys.exit(3)
out = os.environ["LAUNCHER_EVAL_DATA_DIR"]
os.makedirs(out, exist_ok=True)
scores = {"base": [1, 0, 0, 1], "checkpoint": [1, 1, 0, 1]}[label]
with open(os.path.join(out, "0.jsonl"), "w") as f:
    for i, s in enumerate(scores):
        f.write(json.dumps({"input": f"q{i}", "output": "#### 1", "gts": "1", "score": float(s), "step": 0}) + "\n")
    f.write('{"input": "torn')  # a torn last line is skipped
print("step:0 - val-core/openai/gsm8k/acc/mean@1:np.float64(%r)" % (sum(scores) / 4), flush=True)
'''

FAKE_MERGER = r'''
import os, sys
src, dst = sys.argv[1], sys.argv[2]
assert os.path.isdir(src), src
os.makedirs(dst)
open(os.path.join(dst, "config.json"), "w").write("{}")
open(os.path.join(dst, "model.safetensors"), "w").write("")
print("merged", src, "->", dst, flush=True)
'''


def _fake_env(tmp_path, **extra) -> dict:
    (tmp_path / "fake_verl.py").write_text(FAKE_VERL)
    (tmp_path / "fake_merger.py").write_text(FAKE_MERGER)
    return {"HOME": str(tmp_path), "POD_NAME": "x", "PATH": "/usr/bin", "LAUNCHER_ATTEMPT": "a1",
            "LAUNCHER_CHILD_CMD": f"{sys.executable} {tmp_path / 'fake_verl.py'}",
            "LAUNCHER_MERGE_CMD": f"{sys.executable} {tmp_path / 'fake_merger.py'}", **extra}


@pytest.mark.verl  # the `flexible` re-score below is verl's own GSM8K scorer (absent without verl)
def test_eval_runs_base_then_checkpoint_and_prints_what_eval_json_needs(tmp_path, capfd):
    config, spec = _config(tmp_path)
    actor = EV.actor_dir(spec, 7)
    actor.mkdir(parents=True)
    (Path(spec.checkpoint_path) / EV.LATEST_FILE).write_text("7\n")
    code = entry(["--config", str(config), "--mode", "eval", "--baseline", "--checkpoint", "latest"],
                 container_env=_fake_env(tmp_path), probe=PROBE, prepare=lambda *a, **k: None, grace_s=5)
    out = capfd.readouterr()
    assert code == 0, out.err
    doc = eval_doc(out.out.splitlines())
    assert doc["base"]["metrics"]["val-core/openai/gsm8k/acc/mean@1"] == 0.5
    assert doc["checkpoint"]["metrics"]["val-core/openai/gsm8k/acc/mean@1"] == 0.75
    assert doc["checkpoint"]["step"] == 7 and doc["checkpoint"]["model"] == str(EV.merged_dir(spec, 7))
    assert doc["base"]["questions"]["n"] == 4 and sum(doc["checkpoint"]["questions"]["strict"]) == 3
    assert "flexible" in doc["base"]["questions"]  # re-scored with verl's own extractor
    # per-model directories on the volume: separate dumps and file-logger paths per attempt
    assert (Path(spec.checkpoint_path) / "eval" / "a1" / "base" / "generations" / "0.jsonl").is_file()
    assert (Path(spec.checkpoint_path) / "eval" / "a1" / "checkpoint-step7" / "generations" / "0.jsonl").is_file()
    # a second evaluation reuses the merge instead of merging again
    code = entry(["--config", str(config), "--mode", "eval", "--checkpoint", "7"],
                 container_env=_fake_env(tmp_path), probe=PROBE, prepare=lambda *a, **k: None, grace_s=5)
    out = capfd.readouterr()
    assert code == 0 and "merged model present" in out.err and "merged " not in out.out.replace("[eval]", "")


def test_a_failed_model_does_not_hide_the_next_one_but_fails_the_job(tmp_path, capfd):
    config, spec = _config(tmp_path)
    EV.actor_dir(spec, 2).mkdir(parents=True)
    code = entry(["--config", str(config), "--mode", "eval", "--baseline", "--checkpoint", "2"],
                 container_env=_fake_env(tmp_path, FAIL_BASE="1"), probe=PROBE, prepare=lambda *a, **k: None,
                 grace_s=5)
    out = capfd.readouterr()
    assert code == 3
    doc = eval_doc(out.out.splitlines())
    assert doc["base"]["status"] == 3 and doc["base"]["metrics"] == {}
    assert doc["checkpoint"]["status"] == 0 and doc["checkpoint"]["metrics"]


def test_missing_checkpoint_fails_with_a_clear_message(tmp_path, capfd):
    config, _ = _config(tmp_path)
    code = entry(["--config", str(config), "--mode", "eval", "--checkpoint", "9"],
                 container_env=_fake_env(tmp_path), probe=PROBE, prepare=lambda *a, **k: None, grace_s=5)
    assert code == 2 and "no checkpoint at" in capfd.readouterr().err


def test_multi_node_head_runs_the_evaluation_driver_as_its_child(tmp_path, capsys):
    config, _ = _config(tmp_path, "resources.nodes=2")
    env = {"HOME": "/home/verl", "POD_NAME": "grpo-exp3-x-master-0", "PATH": "/usr/bin", "RANK": "0",
           "WORLD_SIZE": "2", "MASTER_ADDR": "grpo-exp3-x-master-0", "MASTER_PORT": "23456"}
    code = entry(["--config", str(config), "--dry-run", "--mode", "eval", "--baseline"], container_env=env,
                 probe=PROBE, prepare=lambda *a, **k: None)
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[out.index("# command") + 1] == shlex.join(EV.driver_argv(str(config), baseline=True, checkpoint=None))
    assert out[out.index("# command") + 1] == f"python3 -m launcher.entrypoint.eval --config {config} --baseline"


# --------------------------------------------------------------------------------------------------
# Checkpoint defaults training relies on


def test_training_saves_at_the_last_step_and_never_resumes_silently():
    spec = load_spec(EXP3)
    ov = dict(o.split("=", 1) for o in verl_overrides(spec))
    # save_freq null → total_training_steps: exactly one checkpoint, at the end (verl saves when
    # save_freq > 0 and (last step or step % save_freq == 0); its own default -1 saves nothing).
    assert spec.trainer.save_freq is None and ov["trainer.save_freq"] == str(spec.trainer.total_training_steps)
    # The trap (notes/verl.md §0.4): verl's own resume_mode=auto reads latest_checkpointed_iteration.txt
    # unchecked, so a second 25-step run of the same experiment would resume at step 25 and train nothing.
    # verl gets the spec's `auto` (the same on every attempt, for its trackers' parameters), but the entrypoint
    # decides first (entrypoint.resume): a finished run stops before verl, and verl's tracker is made to name the
    # checked checkpoint, or set aside (tests/entrypoint/test_resume_decide.py).
    assert spec.trainer.resume_mode == "auto" and ov["trainer.resume_mode"] == "auto"
    assert load_spec(EXP3, ["trainer.save_freq=5"]).trainer.effective_save_freq == 5
    # Per-run directory (job name with its config hash): two configs never share checkpoints.
    assert spec.checkpoint_path == f"/workspace/checkpoints/verl_grpo_gsm8k/{spec.job_name}"
    assert load_spec(EXP3, ["name=other"]).checkpoint_path.endswith("/other-" + load_spec(EXP3, ["name=other"]).config_hash())
    assert json.dumps(spec.model_dump(mode="json")["trainer"]["resume_mode"]) == '"auto"'


def test_a_model_missing_from_the_saved_logs_is_an_error_not_a_silent_gap(tmp_path):
    """A succeeded job whose saved log lacks a model's marker (CI once saved such a log) must not pass for a
    complete evaluation: `write_eval` names the model and `launcher eval --follow` exits 1."""
    from launcher.cli.commands.eval import write_eval
    from launcher.spec.contract import done_line, marker_line

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "e-master-0.log").write_text("\n".join([
        marker_line("base", model="/m"), "step:0 - val-core/openai/gsm8k/acc/mean@1:0.25", done_line("base", 0),
        "step:0 - val-core/openai/gsm8k/acc/mean@1:0.5", done_line("checkpoint", 0)]) + "\n")
    said: list[str] = []
    assert write_eval(tmp_path, said.append, ["base", "checkpoint"]) == ["checkpoint"]
    assert json.loads((tmp_path / "eval.json").read_text())["base"]["metrics"] == {
        "val-core/openai/gsm8k/acc/mean@1": 0.25}
    assert any(s.startswith("error: no result for model checkpoint in the saved logs") for s in said), said
    assert write_eval(tmp_path, said.append, ["base"]) == []
