"""`python -m launcher.entrypoint --config FILE [--dry-run] [--prepare-data-only] [--mode train|eval] [--model PATH]
[--baseline] [--checkpoint STEP|latest]`.

The in-pod program. It reads the experiment config the manifest mounts, prepares GSM8K, sets what
verl and Ray need in a pod (`environment.env_for`) and runs
`python3 -m verl.trainer.main_ppo <verl_overrides(spec)>` as a child process, by role:

- `single-node`: verl starts its own Ray inside the pod, with `ray_num_cpus` = the CPU limit;
- `ray-head` / `ray-worker` (PyTorchJob, resources.nodes > 1): see `ray_cluster`;
- `ray-job-driver` (RayJob): `ray job submit` runs this on the Ray head with RAY_ADDRESS set;
  verl attaches to that cluster; nothing starts Ray here.

`--mode eval --baseline/--checkpoint` runs the GSM8K before/after evaluation (`evaluate`): merge
the checkpoint, then one validation-only verl run per model behind `[eval]` marker lines.

Training decides on every start whether it resumes (`resume`): the driver's pod prints one
`[entrypoint] attempt N: ...` line, points verl's tracker at the newest complete checkpoint of this run
(none: fresh), starts verl with `resume_mode=auto`, and after verl exits 0 leaves the finished marker; a start
of a finished run exits 0 without training. `--dry-run` prints the decision it would make now.

Exit status: 2 for a bad config or environment, else verl's status (128+N if signal N killed it).
`LAUNCHER_CHILD_CMD` (a shell-quoted command) replaces verl's command line: a hook for tests and
for debugging a pod's runtime; it is printed by `--dry-run` like the real command.
"""

from __future__ import annotations

import argparse
import collections
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.spec.contract import attempt_id
from launcher.spec.load import load_spec
from launcher.entrypoint import environment as E
from launcher.entrypoint import eval as EV
from launcher.entrypoint import ray_cluster as R
from launcher.entrypoint import resume as RESUME
from launcher.entrypoint import smoke as SMOKE
from launcher.entrypoint import tracking as TR
from launcher.entrypoint.runner import DEFAULT_GRACE_S, log, run_child
from launcher.errors import EXIT_BAD_INPUT, LauncherError
from launcher.spec.model import ExperimentSpec
from launcher.spec.verl import CPU_RAY_MIN_CPUS, verl_overrides

VERL_COMMAND = ["python3", "-m", "verl.trainer.main_ppo"]
CHILD_CMD_ENV = "LAUNCHER_CHILD_CMD"
FAILURE_TAIL_LINES = 200  # verl's last stderr lines kept to tell why it failed (entrypoint.failure)

PrepareFn = Callable[..., object]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m launcher.entrypoint", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="experiment config (the ConfigMap's spec.yaml)")
    p.add_argument("--dry-run", action="store_true",
                   help="print role, command line and environment; run nothing, touch no network")
    p.add_argument("--prepare-data-only", action="store_true", help="prepare the dataset and exit (init container)")
    p.add_argument("--mode", choices=["train", "eval"], default="train", help="train (default) or validation only")
    p.add_argument("--model", default=None, help="model path for --mode eval (a merged checkpoint)")
    p.add_argument("--baseline", action="store_true", help="--mode eval: evaluate the spec's base model (first)")
    p.add_argument("--checkpoint", default=None, metavar="STEP|latest",
                   help="--mode eval: merge global_step_STEP of this experiment (latest: the last saved) and evaluate it")
    return p.parse_args(argv)


def detect_role(spec: ExperimentSpec, env: Mapping[str, str], *, lenient: bool = False) -> tuple[E.Role, R.Topology | None]:
    """Role of this pod and, for a multi-node PyTorchJob or TrainJob, its topology.

    `lenient` (dry run, init container) does not require the operator's variables: a missing rank
    reads as 0 and a RayJob needs no RAY_ADDRESS.
    """
    if spec.backend == "rayjob":
        if not lenient and not env.get("RAY_ADDRESS"):
            raise LauncherError(
                "backend rayjob: this entrypoint runs as the Ray job driver (`ray job submit` sets RAY_ADDRESS), "
                "but RAY_ADDRESS is not set", EXIT_BAD_INPUT)
        return "ray-job-driver", None
    if spec.resources.nodes == 1:
        return "single-node", None
    topo = R.topology_from_env(env, nodes=spec.resources.nodes, job_name=spec.job_name,
                               default_rank=0 if lenient else None)
    return ("ray-head" if topo.is_head else "ray-worker"), topo


def verl_argv(spec: ExperimentSpec, role: E.Role, *, cpus: int, mode: str, model: str | None,
              env: Mapping[str, str]) -> list[str]:
    """The trainer's command line: verl with the shared override list (or LAUNCHER_CHILD_CMD)."""
    custom = env.get(CHILD_CMD_ENV)
    if custom:
        return shlex.split(custom)
    # Only a pod that starts its own local Ray pins the CPU count; ray.init refuses it when attaching.
    ray_num_cpus = cpus if role == "single-node" else None
    argv = [*VERL_COMMAND, *verl_overrides(spec, mode=mode, model=model, ray_num_cpus=ray_num_cpus)]
    if role == "ray-job-driver" and spec.cpu_training:
        # KubeRay starts the worker pods' raylets, not this entrypoint: the verl CPU platform's environment reaches
        # the actors there through the job's runtime_env (multi-node PyTorchJob/TrainJob raylets inherit it).
        argv += E.runtime_env_overrides(E.cpu_training_env(env, cpus))
    return argv


def raylet_resources(spec: ExperimentSpec, cpus: int) -> tuple[int, int]:
    """`ray start --num-cpus/--num-gpus` of a multi-node pod: its CPU limit and its GPUs. CPU training declares at
    least CPU_RAY_MIN_CPUS logical CPUs and one logical GPU per pod, as verl's own `ray.init` gets them in a single
    pod (spec.verl.verl_overrides): verl's resource pools ask Ray for GPUs, TransferQueue's actors for CPUs."""
    if spec.cpu_training:
        return max(cpus, CPU_RAY_MIN_CPUS), spec.ray_gpus_per_node
    return cpus, spec.resources.gpus_per_node


def _prepare_data(spec: ExperimentSpec, prepare: PrepareFn | None) -> None:
    if spec.data.dataset == "parquet":  # the user's files, used as they are: checked, never written
        from launcher.entrypoint.user_data import check_user_parquet

        for check in check_user_parquet(spec):
            log(f"data: {check.line()}")
        return
    if prepare is None:
        from launcher.entrypoint.gsm8k import prepare_gsm8k as prepare
    log(f"preparing data: {spec.data.train_path}, {spec.data.val_path}")
    result = prepare(spec, allow_download=not spec.model.offline)
    if getattr(result, "skipped", False):
        log("data present; nothing to prepare")
    else:
        rows = getattr(result, "rows", None)
        log(f"data ready (source {getattr(result, 'source', '?')}, rows {rows})")


def dry_run_text(spec: ExperimentSpec, role: E.Role, topo: R.Topology | None, argv: list[str],
                 delta: Mapping[str, str], container_env: Mapping[str, str], cpus: int,
                 settings: R.BootstrapSettings) -> str:
    """What `--dry-run` prints: role, command lines, the environment it sets, inherited secrets by name."""
    lines = [f"# role: {role}"]
    if topo is not None:
        lines.append(f"# rank {topo.rank} of {topo.nnodes}; master {topo.master_addr} ({topo.pod_name(0)})")
        ray_cpus, ray_gpus = raylet_resources(spec, cpus)
        lines.append("# ray: " + shlex.join(R.ray_start_argv(topo, settings, cpus=ray_cpus, gpus=ray_gpus)))
    if role == "ray-worker":
        lines.append("# this pod runs the smoke participant beside its raylet:" if spec.workload == "smoke"
                     else "# this pod runs no trainer; the master runs:")
    lines.append("# command")
    lines.append(shlex.join(argv))
    lines.append("# environment (set or changed)")
    lines.append(E.format_env(delta))
    inherited = {k: v for k, v in container_env.items() if E.is_secret_name(k) and k not in delta}
    if inherited:
        lines.append("# inherited secrets (values never shown)")
        lines.append(E.format_env(inherited))
    for var, ref in (("HF_TOKEN", spec.secrets.hf_token), ("WANDB_API_KEY", spec.secrets.wandb_api_key)):
        if ref is not None and var not in container_env:
            lines.append(f"# warning: spec.secrets sets {var} (Secret {ref.name}/{ref.key}) but it is not in this environment")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, container_env: Mapping[str, str] | None = None,
         probe: E.ContainerProbe | None = None, prepare: PrepareFn | None = None,
         grace_s: float | None = None) -> int:
    """Entry point; the keyword arguments are seams for tests (defaults: the real pod)."""
    args = parse_args(argv)
    # A TrainJob's pod has only Trainer v2's PET_* variables: the training-operator's names from them.
    env = R.operator_env(os.environ if container_env is None else container_env)
    try:
        spec = load_spec(args.config)
        if args.model and args.mode != "eval":
            raise LauncherError("--model is only used with --mode eval", EXIT_BAD_INPUT)
        eval_plan = args.baseline or args.checkpoint is not None
        if eval_plan and (args.mode != "eval" or args.model):
            raise LauncherError("--baseline/--checkpoint need --mode eval and exclude --model", EXIT_BAD_INPUT)
        if args.checkpoint is not None and args.checkpoint != "latest":
            EV.resolve_step(spec, args.checkpoint)  # a bad STEP is bad input, before anything runs
        # The operators set RANK/MASTER_ADDR (training-operator) and RAY_ADDRESS (ray job submit)
        # only in the main container, never in the init container that prepares the data.
        role, topo = detect_role(spec, env, lenient=args.dry_run or args.prepare_data_only)
        settings = R.BootstrapSettings.from_env(env)
        grace = grace_s if grace_s is not None else R.seconds_env(env, "LAUNCHER_KILL_GRACE_S", DEFAULT_GRACE_S)
    except LauncherError as exc:
        print(f"[entrypoint] error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code

    smoke = spec.workload == "smoke"
    if smoke and args.mode == "eval":
        print("[entrypoint] error: workload smoke trains nothing: --mode eval does not apply", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    probe = probe or E.probe_container()
    attempt = attempt_id(env)
    delta = E.env_for(spec, env, role=role, probe=probe, attempt=attempt)
    child_argv = verl_argv(spec, role, cpus=probe.cpus, mode=args.mode, model=args.model, env=env)
    if smoke:
        # The smoke workload replaces verl as the child, in the same role (smoke.py).
        child_argv = SMOKE.argv_for(args.config, role)
    ray_num_cpus = probe.cpus if role == "single-node" else None
    if eval_plan:
        try:
            targets = EV.plan(spec, baseline=args.baseline, checkpoint=args.checkpoint, resolve=False)
        except LauncherError as exc:
            print(f"[entrypoint] error: {exc}", file=sys.stderr, flush=True)
            return exc.exit_code
        # The multi-node head runs the whole evaluation sequence as its one child, attached to Ray.
        child_argv = EV.driver_argv(args.config, baseline=args.baseline, checkpoint=args.checkpoint)

    trains = not smoke and not eval_plan and args.mode == "train" and role != "ray-worker"
    if args.dry_run:
        # what a start would decide now, read from the volume without writing to it
        preview = RESUME.decide(spec) if trains else None
        print(dry_run_text(spec, role, topo, child_argv, delta, env, probe.cpus, settings), flush=True)
        if preview is not None:
            print(f"# resume (trainer.resume_mode {spec.trainer.resume_mode})\n{preview.line()}", flush=True)
        if eval_plan:
            print(EV.plan_text(spec, targets, env=env, ray_num_cpus=ray_num_cpus), flush=True)
        return 0

    log(f"role={role} experiment={spec.name} cpus={probe.cpus} gpus_per_node={spec.resources.gpus_per_node}")
    try:
        # Every pod: verl's driver may run on any node; skips when the init container made the files.
        _prepare_data(spec, prepare)
    except LauncherError as exc:
        print(f"[entrypoint] error: data preparation failed: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    if args.prepare_data_only:
        return 0

    # The pod that runs verl's driver decides, on every start, whether this run resumes (entrypoint.resume).
    decision = None
    if trains:
        decision = RESUME.begin(spec, env, log=log)
        if decision.action == "finished":
            return 0
        earlier = RESUME.refused(spec)
        if earlier is not None:
            log(f"not training: attempt {earlier.get('attempt')} failed with a configuration error "
                f"({earlier.get('what')}: {str(earlier.get('line', '')).strip()[:300]}); a retry cannot fix it: "
                "fix the config (a new run) or submit --new")
            return EXIT_BAD_INPUT

    if role != "ray-worker" and not eval_plan and args.mode == "train":
        # The process that runs verl's driver (or the smoke driver) chooses the tracking run once per attempt.
        tracked = TR.tracking_env(spec, attempt=attempt, log=log)
        delta.update(tracked)
        if not smoke and not env.get(CHILD_CMD_ENV):
            child_argv = [*child_argv, *TR.ray_overrides(tracked)]

    full_env = {**env, **delta}
    os.environ.update(delta)  # this process too talks to Ray (GCS client) with the same settings
    cwd = _workdir(spec, delta)  # on workers too: verl's TaskRunner may write the metrics file there

    ray_cpus, ray_gpus = raylet_resources(spec, probe.cpus)
    if role == "ray-worker":
        assert topo is not None
        return R.run_worker(topo, settings, env=full_env, cpus=ray_cpus, gpus_per_node=ray_gpus,
                            companion_argv=child_argv if smoke else None, grace_s=grace)
    if role == "ray-head":
        assert topo is not None
        code = R.run_head(topo, settings, env=full_env, cpus=ray_cpus, gpus_per_node=ray_gpus,
                          child_argv=child_argv, child_cwd=cwd, grace_s=grace)
        if decision is not None:
            RESUME.finish(spec, decision, code, log=log)
        return code
    if eval_plan:
        return _evaluate(spec, args, full_env, grace=grace, ray_num_cpus=ray_num_cpus, cwd=cwd)
    what = "the smoke workload" if smoke else "verl"
    log(f"starting {what}: {shlex.join(child_argv)}")
    tail: collections.deque = collections.deque(maxlen=FAILURE_TAIL_LINES)
    code = run_child(child_argv, full_env, name="smoke" if smoke else "trainer", grace_s=grace, cwd=cwd,
                     tail=tail if decision is not None else None)
    log(f"{what} exited with status {code}")
    if decision is not None:
        RESUME.finish(spec, decision, code, log=log, tail=tail)
    return code


def _evaluate(spec: ExperimentSpec, args: argparse.Namespace, env: Mapping[str, str], *, grace: float,
              ray_num_cpus: int | None, cwd: str | None) -> int:
    """Single-node pod or RayJob driver: merge and evaluate each model in this process, in turn."""
    try:
        targets = EV.plan(spec, baseline=args.baseline, checkpoint=args.checkpoint)

        def run(argv, child_env, *, name, cwd=None):
            return run_child(argv, child_env, name=name, grace_s=grace, cwd=cwd)

        return EV.run_targets(spec, targets, env=env, run=run, log=log, attempt=attempt_id(env),
                              ray_num_cpus=ray_num_cpus, cwd=cwd)
    except LauncherError as exc:
        print(f"[entrypoint] error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


def _workdir(spec: ExperimentSpec, delta: Mapping[str, str]) -> str | None:
    """Create the experiment's checkpoint (and metrics) directory; verl's cwd (Hydra writes outputs/ there)."""
    try:
        Path(spec.checkpoint_path).mkdir(parents=True, exist_ok=True)
        metrics = delta.get("VERL_FILE_LOGGER_PATH")
        if metrics:
            Path(metrics).parent.mkdir(parents=True, exist_ok=True)
            log(f"verl file logger: {metrics}")
        return spec.checkpoint_path
    except OSError as exc:
        log(f"warning: cannot create {spec.checkpoint_path} ({exc}); verl runs in /tmp")
        return "/tmp"


if __name__ == "__main__":
    sys.exit(main())
