"""`launcher doctor --rehearse`: the user's own experiment, two real verl steps of the built-in tiny model, before
the real run spends GPU hours (pure: the spec, and the verdicts from what the job left behind).

`rehearsal_spec` keeps what decides whether a run can work on this cluster: the image, backend, nodes, GPU and CPU
requests, scheduling, security, storage, data, algorithm and batch sizes, the reward function and the user's verl
overrides. It changes only what makes it short and harmless (REHEARSAL): the model becomes `builtin:tiny-qwen2`
(in the project's images, nothing is downloaded), 2 steps with a checkpoint at step 2 (verl's checkpoint path on
the run's volume is written once), no validation, always fresh, trackers off (nothing lands in the user's MLflow or
W&B), sequence lengths capped to the tiny model's 1,024 positions, rollout tensor parallelism at most its 2
attention heads; named `<name>-rehearse`, so its job and checkpoints never meet the real run's.

`rehearsal_checks` reads the job's parsed step lines: the two steps, then each stage verl ran in them (vLLM's
rollout, the reward, the FSDP update, the weight sync, the checkpoint), and the result. A failed rehearsal is one
check whose cause comes from the pods' last lines and status (FAILURE_CAUSES) with the fix for it.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Mapping, Sequence

from launcher.doctor.check import FAIL, OK, WARN, Check
from launcher.doctor.smoke import SMOKE_FIXES, SmokeOutcome, image_check
from launcher.spec.contract import carries_builtin_models
from launcher.spec.model import ExperimentSpec

REHEARSE_SUFFIX = "-rehearse"
MODEL = "builtin:tiny-qwen2"
STEPS = 2
MAX_PROMPT, MAX_RESPONSE = 512, 256  # within the tiny model's 1,024 positions
MAX_TP = 2  # the tiny model's attention heads: vLLM shards heads across tensor-parallel ranks
# What the rehearsal changes, in words (the verb prints it; the module docstring says why).
REHEARSAL = (f"model {MODEL}, {STEPS} steps, a checkpoint at step {STEPS}, no validation, fresh, trackers off, "
             f"prompt/response at most {MAX_PROMPT}/{MAX_RESPONSE} tokens, rollout tensor parallel at most {MAX_TP}")


def rehearse_name(name: str) -> str:
    """`<name>-rehearse`, shortened so it stays within `spec.NAME_MAX`."""
    from launcher.spec.names import NAME_MAX

    return name[: NAME_MAX - len(REHEARSE_SUFFIX)].rstrip("-") + REHEARSE_SUFFIX


def rehearsal_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The experiment as a rehearsal (see the module docstring); BadInput when it cannot be one."""
    from launcher.errors import BadInput
    from launcher.spec.load import spec_from_raw

    if spec.workload != "grpo":
        raise BadInput(f"workload: --rehearse rehearses a GRPO experiment (workload grpo), got {spec.workload!r}; "
                       "for a smoke config use --smoke")
    if not carries_builtin_models(spec.image):
        raise BadInput(f"image: --rehearse runs {MODEL}, which the project's images carry "
                       f"(ghcr.io/grpo-launcher/verl-grpo, docker/), got {spec.image!r}; rehearse with the project's "
                       "image, or build yours FROM it")
    raw = spec.model_dump(mode="json")
    raw["name"] = rehearse_name(spec.name)
    raw["model"].update(path=MODEL, local_dir=None, offline=True, trust_remote_code=False)
    raw["data"]["max_prompt_length"] = min(raw["data"]["max_prompt_length"], MAX_PROMPT)
    raw["data"]["max_response_length"] = min(raw["data"]["max_response_length"], MAX_RESPONSE)
    raw["rollout"]["tensor_parallel_size"] = min(raw["rollout"]["tensor_parallel_size"], MAX_TP)
    raw["trainer"].update(total_training_steps=STEPS, total_epochs=max(raw["trainer"]["total_epochs"], STEPS),
                          save_freq=STEPS, test_freq=-1, val_before_train=False, resume_mode="disable",
                          resume_from_path=None, max_actor_ckpt_to_keep=1,
                          logger=[x for x in raw["trainer"]["logger"] if x in ("console", "file")] or ["console"])
    for tracker in ("mlflow", "tensorboard", "wandb"):
        raw["tracking"][tracker]["enabled"] = False
    return spec_from_raw(raw, f"{spec.name} as a rehearsal")


# --------------------------------------------------------------------------------------------------
# The verdicts

def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: float) -> str:
    return f"{value:.4g}"


# The stages of a GRPO step, each with the metrics that show it ran (verl 0.9.1's keys) and how to say what they
# show. The checkpoint is written in the last step only.
STAGES: tuple[tuple[str, str, tuple[str, ...], Callable[[Mapping], str]], ...] = (
    ("rollout", "vLLM rollout", ("timing_s/gen", "response_length/mean"),
     lambda r: f"{_fmt(r['response_length/mean'])} tokens per response, {_fmt(r['timing_s/gen'])}s"),
    ("reward", "reward", ("critic/score/mean",),
     lambda r: f"score mean {_fmt(r['critic/score/mean'])}"
               + (f" in [{_fmt(r['critic/score/min'])}, {_fmt(r['critic/score/max'])}]"
                  if _finite(r.get("critic/score/min")) and _finite(r.get("critic/score/max")) else "")),
    ("update", "actor update (FSDP)", ("actor/pg_loss", "actor/grad_norm"),
     lambda r: f"pg_loss {_fmt(r['actor/pg_loss'])}, grad_norm {_fmt(r['actor/grad_norm'])}"),
    ("weight_sync", "weights to vLLM", ("timing_s/update_weights",),
     lambda r: f"{_fmt(r['timing_s/update_weights'])}s"),
    ("checkpoint", "checkpoint on the run's volume", ("timing_s/save_checkpoint",),
     lambda r: f"global_step_{r['step']} saved in {_fmt(r['timing_s/save_checkpoint'])}s"),
)


def _storage_fix(spec: ExperimentSpec) -> str:
    return (f"verl writes checkpoints under trainer.checkpoint_dir on the volume at storage.mount_path "
            f"({spec.storage.mount_path}): the claim ({spec.storage.claim_name or 'none: an emptyDir'}) must be "
            f"writable by gid security.run_as_group ({spec.security.run_as_group}) and have room for the real "
            "run's checkpoints")


# Why a rehearsal failed, from the pods' last lines: (name, pattern, fix). First match wins; more specific first.
FAILURE_CAUSES: tuple[tuple[str, str, Callable[[ExperimentSpec], str]], ...] = (
    ("the built-in model is not in the image",
     r"/opt/grpo-launcher/models/\S+.{0,80}(No such file|does not appear to have|not a local folder|not found)",
     lambda spec: f"the image {spec.image} does not carry {MODEL}: use the project's image (docker/) or build "
                  "yours FROM it"),
    ("GPU out of memory", r"CUDA out of memory|torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError",
     lambda spec: "the GPUs ran out of memory with a tiny model: other processes hold them, or "
                  f"rollout.gpu_memory_utilization ({spec.rollout.gpu_memory_utilization}) leaves the actor too "
                  "little; lower it, or check `nvidia-smi` on the nodes"),
    ("vLLM could not allocate its KV cache",
     r"No available memory for the cache blocks|Insufficient memory for KV cache|KV cache .{0,60}(too small|larger than)",
     lambda spec: f"raise rollout.gpu_memory_utilization (now {spec.rollout.gpu_memory_utilization}) or give the "
                  "pods more memory (resources.memory on CPU nodes)"),
    ("NCCL", r"NCCL (error|WARN)|ncclSystemError|ncclInternalError|ProcessGroupNCCL|"
             r"Watchdog caught collective operation timeout",
     lambda spec: SMOKE_FIXES["nccl_allreduce"]),
    ("verl refused the config",
     r"Could not override '|Error merging override|Key '[^']+' is not in struct|omegaconf\.errors\.|hydra\.errors\.|"
     r"verl/utils/config\.py\", line \d+, in validate_config",
     lambda spec: "fix the item verl names (verl.overrides or a typed field; `launcher validate CONFIG` composes the "
                  "whole list with verl's config where verl is installed)"),
    ("the checkpoint could not be written",
     r"(PermissionError|Permission denied|No space left on device|Read-only file system).{0,200}"
     r"(global_step_|checkpoint|/workspace)",
     _storage_fix),
    ("Ray lost a node", r"NodeDiedError|has been marked dead|OwnerDiedError|ActorDiedError|ActorUnavailableError",
     lambda spec: "a Ray actor or node died: read the pod logs (--keep) for the process that exited first; an "
                  "OOMKilled pod needs more resources.memory"),
)
_CAUSES = tuple((name, re.compile(p), fix) for name, p, fix in FAILURE_CAUSES)
_ERROR_LINE = re.compile(r"\b(\w+(Error|Exception)|Traceback|FAILED|error:)")


def failure_cause(spec: ExperimentSpec, outcome: SmokeOutcome) -> tuple[str, str]:
    """(what went wrong, the fix) from the pods' status and last lines (see FAILURE_CAUSES)."""
    from launcher.kube import jobs as J

    killed = [f"{J.short_name(p, outcome.job)}: {J.pod_problem(p)}" for p in outcome.pods
              if "OOMKilled" in (J.pod_problem(p) or "")]
    if killed:
        return "; ".join(killed), (f"raise resources.memory (now {spec.resources.memory}): the pod's memory limit "
                                   "stopped it")
    for pod, lines in outcome.lines.items():
        for line in lines[-400:]:
            for name, rx, fix in _CAUSES:
                if rx.search(line):
                    return f"{name} ({pod}: {line.strip()[:300]})", fix(spec)
    last = [f"{pod}: {ln.strip()[:300]}" for pod, lines in outcome.lines.items()
            for ln in [next((x for x in reversed(lines[-400:]) if _ERROR_LINE.search(x)), "")] if ln]
    why = f"job {outcome.state.phase}: {outcome.state.reason or 'no reason given'}"
    if outcome.timed_out:
        why = f"timed out after {outcome.timeout:g}s"
    return "; ".join([why, *last[:2]]), "read the pod logs (rerun with --keep; `launcher logs`)"


def checkpoint_check(title: str, timing: str, lines: Mapping[str, Sequence[str]], done: bool) -> Check:
    """verl reported a save (`timing`); the entrypoint's line after verl exited says whether the files are on the
    volume, every rank's actor shards and data.pt (`contract.checkpoint_line`)."""
    from launcher.spec.contract import read_checkpoint_line

    said = [r for pod_lines in lines.values() for ln in pod_lines if (r := read_checkpoint_line(ln)) is not None]
    if not said:
        return Check("rehearse: checkpoint", FAIL if done else WARN,
                     f"{title}: verl reported {timing}, but no pod said what is on the volume",
                     "an image older than this launcher does not say it: rebuild it (docker/); else read the pod "
                     "logs (--keep)")
    step, complete, rest = said[-1]
    if complete and step == STEPS:
        return Check("rehearse: checkpoint", OK, f"{title}: {timing}; global_step_{step} on the volume: {rest}")
    where = f"global_step_{step}" if step is not None else "no checkpoint"
    return Check("rehearse: checkpoint", FAIL, f"{title}: verl reported {timing}, but {where} on the volume: {rest}",
                 "verl's save did not reach the volume whole: check the claim's free space and that every pod mounts "
                 "the same volume (storage.access_mode ReadWriteMany for several nodes)")


def rehearsal_checks(spec: ExperimentSpec, outcome: SmokeOutcome, rows: Sequence[Mapping]) -> list[Check]:
    """The pods, the two steps and each stage verl ran in them, and the result (with its cause and fix)."""
    checks = [image_check(spec, outcome, name="rehearse: pods")]
    if checks[0].status == FAIL:
        return checks
    by_step = {int(r["step"]): r for r in rows if "step" in r}
    steps = sorted(by_step)
    done = steps[-STEPS:] == list(range(1, STEPS + 1)) if steps else False
    times = ", ".join(f"step {s} {_fmt(by_step[s]['timing_s/step'])}s" for s in steps if _finite(by_step[s].get("timing_s/step")))
    if done:
        checks.append(Check("rehearse: steps", OK, f"{STEPS} real verl steps of {MODEL} ({times})"))
    else:
        checks.append(Check("rehearse: steps", FAIL, f"{len(steps)} of {STEPS} steps logged"
                            + (f" ({times})" if times else ""), "see rehearse: result"))
    for key, title, needs, say in STAGES:
        seen = [by_step[s] for s in steps if all(_finite(by_step[s].get(k)) for k in needs)]
        if seen and key == "checkpoint":
            checks.append(checkpoint_check(title, say(seen[-1]), outcome.lines, done))
        elif seen:
            checks.append(Check(f"rehearse: {key}", OK, f"{title}: {say(seen[-1])}"))
        elif steps:
            checks.append(Check(f"rehearse: {key}", FAIL if done else WARN,
                                f"{title}: not in the logged steps ({', '.join(needs)} missing)",
                                "read the pod logs (--keep): this verl did not report the stage"))
    if done and outcome.state.succeeded:
        checks.append(Check("rehearse: result", OK, f"{outcome.job} succeeded: {STEPS} steps of the experiment "
                            "trained, checkpointed and exited 0"))
    else:
        cause, fix = failure_cause(spec, outcome)
        checks.append(Check("rehearse: result", FAIL, f"{outcome.job}: {cause}", fix))
    return checks
