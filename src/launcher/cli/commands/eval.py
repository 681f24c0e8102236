"""`launcher eval CONFIG [--checkpoint STEP|latest] [--baseline]`: GSM8K before/after evaluation job."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import add_config_arguments

HELP = "evaluate the base model and/or a trained checkpoint on GSM8K's test split (validation-only verl)"
DESCRIPTION = (
    "Render and submit an evaluation job for CONFIG's experiment (component 'eval', name <name>-eval-<hash>, "
    "the hash covering the config and the models evaluated): same image, backend and GPU request as training. "
    "In the pod, --checkpoint merges <checkpoint_path>/global_step_N/actor into Hugging Face format (once, "
    "into the run's volume) and --baseline evaluates the config's model; each model is one greedy, "
    "validation-only verl run on data.val_files, base first. With --follow the logs are streamed into "
    "runs/<eval-job>/ and eval.json is written; `launcher report RUN_DIR --eval runs/<eval-job>` (or a report "
    "of the eval run dir itself) then shows base vs trained accuracy with a 95% confidence interval. "
    "Exit codes: 0 ok, 1 run failed (--follow), 2 bad input, 3 cluster unreachable or refused."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--checkpoint", metavar="STEP|latest", default=None,
                        help="evaluate the training run's checkpoint global_step_STEP (latest: the last saved; "
                             "the default when neither --checkpoint nor --baseline is given)")
    parser.add_argument("--baseline", action="store_true", help="also (or only) evaluate the untrained base model")
    parser.add_argument("--dry-run", nargs="?", const="client", choices=["client", "server"],
                        help="client: only render and print; server: send with dryRun=All and print the result")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="follow the logs until the job finishes, then write eval.json; exit 0 when the job "
                             "succeeded and every model asked for has its result, else 1")


def models_key(baseline: bool, checkpoint: str | None) -> str:
    """What the job evaluates, as hashed into its name: 'base', 'checkpoint=25', 'base+checkpoint=latest'."""
    parts = (["base"] if baseline else []) + ([f"checkpoint={checkpoint}"] if checkpoint is not None else [])
    return "+".join(parts)


def entry_args(baseline: bool, checkpoint: str | None) -> tuple[str, ...]:
    """The entrypoint's arguments for this evaluation (appended to the job's command)."""
    args = ["--mode", "eval"]
    if baseline:
        args.append("--baseline")
    if checkpoint is not None:
        args += ["--checkpoint", checkpoint]
    return tuple(args)


def plan(args: argparse.Namespace):
    """(spec, job name, objects) for the parsed arguments; BadInput for impossible requests."""
    from launcher.cli.common import load_from_args
    from launcher.errors import BadInput
    from launcher.spec.names import eval_job_name
    from launcher.render.manifests import render

    if args.namespace:
        args.sets = [*args.sets, f"scheduling.namespace={args.namespace}"]
    spec = load_from_args(args)
    checkpoint = args.checkpoint
    if checkpoint is None and not args.baseline:
        checkpoint = "latest"
    if checkpoint is not None:
        if checkpoint != "latest" and (not checkpoint.isdigit() or int(checkpoint) < 1):
            raise BadInput(f"--checkpoint must be a step number >= 1 or 'latest', got {checkpoint!r}")
        if not spec.storage.claim_name:
            # The training pod's emptyDir went with it: there is no checkpoint for a new pod to read.
            raise BadInput("--checkpoint needs the training run's checkpoints on a persistent volume, but "
                           "storage.claim_name is null (an emptyDir, lost with the training pod); set "
                           "storage.claim_name for training and evaluation, or evaluate only --baseline")
        if spec.trainer.save_freq == -1:
            raise BadInput("--checkpoint: trainer.save_freq is -1 in this config, so training saved no checkpoint")
    checkpoint = str(int(checkpoint)) if checkpoint not in (None, "latest") else checkpoint
    args.checkpoint = checkpoint  # resolved once: `_submit` checks eval.json against the models asked for
    name = eval_job_name(spec, models_key(args.baseline, checkpoint))
    objects = render(spec, component="eval", entry_args=entry_args(args.baseline, checkpoint), instance=name)
    return spec, name, objects


def run(args: argparse.Namespace) -> int:
    from launcher.render.manifests import to_yaml

    spec, name, objects = plan(args)
    if args.dry_run == "client":
        print(to_yaml(objects), end="")
        return 0
    return _submit(args, spec, name, objects)


def _submit(args, spec, name, objects) -> int:
    """Pre-flight, create with rollback (or attach to the same eval), optionally follow: submit's machinery."""
    from launcher.cli.cluster import connect, err, follow_run
    from launcher.cli.commands.submit import _exit_for, create_all, preflight
    from launcher.spec.load import dump_spec
    from launcher.errors import BadInput
    from launcher.kube import JOB_RESOURCES
    from launcher.kube import jobs as J
    from launcher.render.manifests import to_yaml
    from launcher.run.dirs import RunDir

    kube = connect(args, spec.scheduling.namespace)
    kube.namespace = spec.scheduling.namespace
    preflight(kube, spec)
    res = JOB_RESOURCES[spec.backend]
    existing = kube.get(res, name)
    attached = existing is not None
    if attached and not J.owned(existing):
        raise BadInput(f"{res.kind} {name} exists but was not created by the launcher; not touching it")
    if args.dry_run == "server":
        if attached:
            err(f"{res.kind} {name} already exists: a server dry run would create nothing")
            return 0
        from launcher.cli.commands.submit import server_dry_run

        print(to_yaml(server_dry_run(kube, objects, on_notice=err)), end="")
        return 0
    run_dir = RunDir.of(name, args.runs_dir).ensure()
    if attached:
        err(f"{res.kind} {name} already evaluates these models with this config: attaching to it")
        job = existing
    else:
        job = create_all(kube, objects, on_notice=err)
    if not run_dir.spec.exists() or not attached:
        run_dir.write_text(run_dir.spec, dump_spec(spec))
        run_dir.write_text(run_dir.manifests, to_yaml(objects))
    verb = "attached to" if attached else "submitted"
    print(f"{verb} evaluation {res.kind} {name} in namespace {kube.namespace} (run dir: {run_dir.path})", flush=True)
    if not args.follow:
        return 0
    ref = J.JobRef(spec.backend, name, job)
    result = follow_run(kube, ref, run_dir, total_steps=None)
    code = _exit_for(result.state, err)
    wanted = (["base"] if args.baseline else []) + (["checkpoint"] if args.checkpoint is not None else [])
    missing = write_eval(run_dir.path, err, wanted)
    return code or (1 if missing else 0)


def write_eval(run_dir, err, wanted=()) -> list[str]:
    """eval.json from the followed logs, with a one-line summary per model; the `wanted` models it lacks."""
    from launcher.run.eval import EVAL_JSON, HEADLINE_KEY, write_eval_json
    from launcher.spec.contract import LABELS

    doc = write_eval_json(run_dir) or {}
    if doc:
        for label in LABELS:
            if label in doc:
                acc = doc[label]["metrics"].get(HEADLINE_KEY)
                err(f"{label}: {HEADLINE_KEY} = {acc if acc is not None else 'not logged'}")
        err(f"wrote {run_dir / EVAL_JSON}")
    else:
        err("warning: no [eval] marker in the logs: eval.json not written")
    missing = [label for label in wanted if label not in doc]
    if missing:  # the job may have succeeded, but without the marker nothing can be attributed to that model
        err(f"error: no result for model {', '.join(missing)} in the saved logs ({run_dir / 'logs'}): "
            "its [eval] marker line is not there")
    return missing
