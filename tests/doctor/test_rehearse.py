"""`launcher doctor --rehearse` (pure parts): the rehearsal's spec, derived from the user's experiment, and its
verdicts from verl's parsed step rows and the pods' last lines. The rows use verl 0.9.1's metric keys, as the real
rehearsal on the local cluster's real nodes shows them (tests/e2e/test_doctor_e2e.py runs it for real)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kube_fakes import pod
from launcher.doctor import check as C
from launcher.doctor import rehearse as RH
from launcher.doctor.smoke import SmokeOutcome
from launcher.errors import BadInput
from launcher.kube import jobs as J
from launcher.spec.load import load_spec
from launcher.spec.verl import verl_overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
EXP3, EXP4, CPU = (str(CONFIGS / f) for f in ("grpo-exp3.yaml", "grpo-exp4.yaml", "grpo-exp3-cpu.yaml"))


def test_the_rehearsal_is_the_experiment_with_the_tiny_model_for_two_steps():
    user = load_spec(EXP4, ["scheduling.namespace=team", "tracking.mlflow.enabled=true",
                            "tracking.mlflow.tracking_uri=http://mlflow:5000", "rollout.tensor_parallel_size=2",
                            "resources.nodes=2", "verl.overrides+=actor_rollout_ref.rollout.max_num_batched_tokens=2048"])
    r = RH.rehearsal_spec(user)
    assert r.name == "grpo-exp4-rehearse" and r.job_name != user.job_name
    assert r.model.path == "builtin:tiny-qwen2" and r.model.offline
    assert (r.trainer.total_training_steps, r.trainer.save_freq, r.trainer.test_freq) == (2, 2, -1)
    assert r.trainer.resume_mode == "disable" and not r.trainer.val_before_train
    assert not (r.tracking.mlflow.enabled or r.tracking.wandb.enabled or r.tracking.tensorboard.enabled)
    assert "mlflow" not in r.loggers
    # exp4's 512-token responses are capped to the tiny model's positions; its 512-token prompts already fit
    assert (r.data.max_prompt_length, r.data.max_response_length) == (512, 256)
    # what decides whether the run can work on this cluster is the user's
    for same in ("image", "backend", "resources", "scheduling", "security", "storage", "run_policy", "network",
                 "secrets", "algorithm", "actor", "verl", "reward"):
        assert getattr(r, same) == getattr(user, same), same
    assert (r.rollout.n, r.rollout.tensor_parallel_size, r.data.train_batch_size) == (4, 2, 8)
    # the user's verl overrides reach verl in the rehearsal too, after the launcher's list
    assert verl_overrides(r)[-1] == "actor_rollout_ref.rollout.max_num_batched_tokens=2048"


def test_rollout_tensor_parallelism_is_capped_at_the_tiny_models_heads():
    assert RH.rehearsal_spec(load_spec(EXP3, ["rollout.tensor_parallel_size=4", "resources.gpus_per_node=4"])) \
        .rollout.tensor_parallel_size == 2


def test_the_cpu_experiment_rehearses_on_its_cpu_pods():
    r = RH.rehearsal_spec(load_spec(CPU))
    assert r.cpu_training and r.image.endswith("-cpu") and r.resources.gpus_per_node == 0
    assert r.name == "grpo-exp3-cpu-rehearse"


@pytest.mark.parametrize("sets,field,words", [
    (["workload=smoke"], "workload", "use --smoke"),
    (["image=nvcr.io/nvidia/pytorch:25.01-py3"], "image", "which the project's images carry"),
])
def test_what_cannot_be_rehearsed_is_refused_naming_the_field(sets, field, words):
    with pytest.raises(BadInput) as e:
        RH.rehearsal_spec(load_spec(EXP3, sets))
    assert str(e.value).startswith(f"{field}: ") and words in str(e.value)


def step(n: int, **extra) -> dict:
    row = {"step": n, "timing_s/step": 30.5 if n == 1 else 3.25, "timing_s/gen": 1.5, "response_length/mean": 31.0,
           "critic/score/mean": 0.125, "critic/score/min": 0.0, "critic/score/max": 0.5, "actor/pg_loss": -0.01,
           "actor/grad_norm": 0.75, "timing_s/update_weights": 0.4}
    if n == 2:
        row["timing_s/save_checkpoint"] = 1.25
    return {**row, **extra}


@pytest.fixture
def spec():
    return RH.rehearsal_spec(load_spec(CPU, ["scheduling.namespace=ns"]))


# what the entrypoint prints after verl exits 0 (launcher.entrypoint.resume.checkpoint_report), as the raw log has it
SAVED = "2026-12-07T04:00:00.1Z [entrypoint] checkpoint global_step_2 on the volume: complete (5 files, 12.3 MB)"


def outcome(spec, lines=None, state=("Succeeded", True, True, ""), pods=None):
    job = spec.job_name
    pods = pods if pods is not None else [pod(f"{job}-master-0", job, state="terminated")]
    return SmokeOutcome(job, J.JobState(*state), pods, lines or {"master-0": ["...", SAVED]}, timeout=60)


def by_name(checks):
    return {c.name: c for c in checks}


def test_two_steps_with_every_stage_pass_and_say_what_each_showed(spec):
    checks = RH.rehearsal_checks(spec, outcome(spec), [step(1), step(2)])
    assert [c.name for c in checks] == ["rehearse: pods", "rehearse: steps", "rehearse: rollout", "rehearse: reward",
                                        "rehearse: update", "rehearse: weight_sync", "rehearse: checkpoint",
                                        "rehearse: result"]
    assert all(c.status == C.OK for c in checks), [(c.name, c.finding) for c in checks if c.status != C.OK]
    c = by_name(checks)
    assert c["rehearse: steps"].finding == "2 real verl steps of builtin:tiny-qwen2 (step 1 30.5s, step 2 3.25s)"
    assert c["rehearse: reward"].finding == "reward: score mean 0.125 in [0, 0.5]"
    assert c["rehearse: checkpoint"].finding == ("checkpoint on the run's volume: global_step_2 saved in 1.25s; "
                                                 "global_step_2 on the volume: complete (5 files, 12.3 MB)")
    assert c["rehearse: update"].finding == "actor update (FSDP): pg_loss -0.01, grad_norm 0.75"


@pytest.mark.parametrize("said,words", [
    ("[entrypoint] checkpoint global_step_2 on the volume: incomplete, missing data.pt", "missing data.pt"),
    ("[entrypoint] checkpoint global_step_1 on the volume: complete (5 files, 12.3 MB)", "global_step_1"),
    ("[entrypoint] checkpoint none on the volume under /workspace/checkpoints/p/j", "no checkpoint"),
    (None, "no pod said what is on the volume"),
])
def test_the_checkpoint_is_judged_by_what_is_on_the_volume_not_by_verls_save_time(spec, said, words):
    """verl reported its save (timing_s/save_checkpoint): the stage still fails when the entrypoint found the files
    missing, an older step, none, or said nothing."""
    lines = {"master-0": ["...", *([said] if said else [])]}
    c = by_name(RH.rehearsal_checks(spec, outcome(spec, lines), [step(1), step(2)]))["rehearse: checkpoint"]
    assert c.status == C.FAIL and words in c.finding and "saved in 1.25s" in c.finding, (c.status, c.finding)


def test_a_stage_whose_metrics_are_missing_or_not_finite_fails(spec):
    rows = [step(1, **{"actor/grad_norm": float("nan")}), step(2, **{"actor/grad_norm": float("inf")})]
    c = by_name(RH.rehearsal_checks(spec, outcome(spec), rows))
    assert c["rehearse: update"].status == C.FAIL and "actor/grad_norm" in c["rehearse: update"].finding
    assert c["rehearse: rollout"].status == C.OK


@pytest.mark.parametrize("line,cause,fix", [
    ("omegaconf.errors.ConfigAttributeError: Key 'no_such_key' is not in struct", "verl refused the config",
     "fix the item verl names"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "GPU out of memory",
     "rollout.gpu_memory_utilization (0.5)"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
     "vLLM could not allocate its KV cache", "raise rollout.gpu_memory_utilization"),
    ("torch.distributed.DistBackendError: NCCL error in: ..., unhandled system error", "NCCL",
     "network.nccl_socket_ifname"),
    ("PermissionError: [Errno 13] Permission denied: '/workspace/checkpoints/x/global_step_2'",
     "the checkpoint could not be written", "writable by gid security.run_as_group (1000)"),
    ("OSError: /opt/grpo-launcher/models/tiny-qwen2 does not appear to have a file named config.json",
     "the built-in model is not in the image", "does not carry builtin:tiny-qwen2"),
])
def test_a_failed_rehearsal_names_its_cause_and_the_fix(spec, line, cause, fix):
    lines = {"master-0": ["[entrypoint] starting verl", "(TaskRunner pid=1) Traceback (most recent call last):", line]}
    checks = RH.rehearsal_checks(spec, outcome(spec, lines, ("Failed", True, False, "BackoffLimitExceeded")), [])
    r = by_name(checks)["rehearse: result"]
    assert r.status == C.FAIL and f"{spec.job_name}: {cause} (master-0: " in r.finding, r.finding
    assert fix in r.fix, r.fix
    assert by_name(checks)["rehearse: steps"].status == C.FAIL and "0 of 2 steps logged" in \
        by_name(checks)["rehearse: steps"].finding


def test_an_oom_killed_pod_is_the_cause_before_any_line(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Failed", state="terminated")
    p["spec"]["containers"][0]["resources"] = {"limits": {"memory": "12Gi"}}
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled", "exitCode": 137}
    r = by_name(RH.rehearsal_checks(spec, outcome(spec, {"master-0": ["loading"]}, ("Failed", True, False, ""), [p]),
                                    [step(1)]))["rehearse: result"]
    assert r.status == C.FAIL and "OOMKilled" in r.finding and "raise resources.memory (now 12Gi)" in r.fix


def test_an_unknown_failure_shows_the_last_error_line(spec):
    lines = {"master-0": ["step:1 - x:1", "RuntimeError: something new", "[entrypoint] verl exited 1"]}
    r = by_name(RH.rehearsal_checks(spec, outcome(spec, lines, ("Failed", True, False, "BackoffLimitExceeded")),
                                    [step(1)]))["rehearse: result"]
    assert "job Failed: BackoffLimitExceeded; master-0: RuntimeError: something new" in r.finding
    assert "read the pod logs" in r.fix
