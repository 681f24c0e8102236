"""Arguments and helpers shared by the verbs that talk to a cluster (kubectl-like flags)."""

from __future__ import annotations

import argparse
import sys


def add_cluster_arguments(parser: argparse.ArgumentParser, *, runs_dir: bool = True) -> None:
    """`-n/--namespace`, `--kubeconfig`, `--context` (as kubectl) and `--runs-dir`."""
    parser.add_argument("-n", "--namespace", help="namespace (default: the config's, else the context's)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context to use")
    if runs_dir:
        parser.add_argument("--runs-dir", metavar="DIR",
                            help="run directories root (default: $LAUNCHER_RUNS_DIR, else ./runs)")


def add_run_arguments(parser: argparse.ArgumentParser, *, runs_dir: bool = True) -> None:
    """The NAME of a run (job or experiment) and the cluster flags: the verbs that act on one run."""
    parser.add_argument("name", metavar="NAME", help="job name, or experiment name (its newest run)")
    add_cluster_arguments(parser, runs_dir=runs_dir)


def open_run(args: argparse.Namespace):
    """(kube, the run's `JobRef`, its `RunDir`, created) for `add_run_arguments`' flags."""
    from launcher.kube import jobs as J
    from launcher.run.dirs import RunDir

    kube = connect(args)
    ref = J.find_run(kube, args.name)
    return kube, ref, RunDir.of(ref.name, args.runs_dir).ensure()


def follow_watched(args: argparse.Namespace, kube, ref, run_dir, *, emit=None, **follow_kw) -> int:
    """`follow_run` with the watchdog of `args`, then the verb's exit code: the watchdog's when it deleted the
    run, else 1 for a failed run and 0 otherwise; the final phase (and findings, when any) go to stderr."""
    from launcher.cli.watchdog import deleted_exit, session_for

    watch = session_for(args, kube, ref, run_dir, emit=emit)
    result = follow_run(kube, ref, run_dir, watch=watch, **follow_kw)
    deleted = deleted_exit(watch)
    if deleted is not None:
        return deleted
    st = result.state
    found = f"; {len(watch.findings)} finding(s) (runs dir: {run_dir.findings})" if emit is not None else ""
    err(f"{ref.name}: {st.phase}" + (f" ({st.reason})" if st.reason else "") + found)
    return 1 if st.finished and not st.succeeded else 0


def connect(args: argparse.Namespace, namespace: str | None = None):
    """The `Kube` seam for these flags; nothing is sent until the first request."""
    from launcher.kube import Kube

    return Kube.connect(args.kubeconfig, args.context, args.namespace or namespace)


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def spec_total_steps(run_dir) -> int | None:
    """trainer.total_training_steps from a run's saved spec.yaml, if there is one."""
    try:
        return int(run_dir.saved_spec()["trainer"]["total_training_steps"])
    except (KeyError, TypeError, ValueError):
        return None


def follow_run(kube, ref, run_dir, *, total_steps=None, table=False, quiet_lines=False, follow=True, watch=None,
               export=None, **follower_kw):
    """Follow a run's logs with the progress display; returns the `FollowResult`.

    `table`: the step table and progress line on stdout, raw lines only to the run directory (`submit --follow`
    on a terminal); else every raw line is printed (none with `quiet_lines`) and the progress line goes to
    stderr. `watch` (a `cli.watchdog.WatchSession`) sees every step and status; `export` (a
    `launcher.export.live.LiveExport`) receives the new steps as they arrive and sends the rest when the
    follow ends. `follower_kw` goes to `LogFollower` (container, pods, stream_hook, ...).
    """
    from launcher.cli.progress import TABLE_ROWS, RunProgress, print_line
    from launcher.run.follow import LogFollower

    total = total_steps or spec_total_steps(run_dir)
    if table:
        from rich.console import Console

        progress, on_line = RunProgress(ref.name, total, console=Console(), table_rows=TABLE_ROWS), None
    else:
        progress = RunProgress(ref.name, total)
        on_line = (lambda p, line: None) if quiet_lines else print_line
    try:
        with progress:
            follower = LogFollower(
                kube, ref, run_dir, on_line=on_line,
                on_records=chain(progress.records, watch and watch.records, export and export.on_records),
                on_notice=err, on_status=chain(progress.status, watch and watch.status), **follower_kw)
            result = follower.run(follow=follow)
    finally:
        if export is not None:
            export.finish()
    for e in result.errors:
        err(f"warning: log follower: {e}")
    return result


def chain(*callbacks):
    """One callback calling each of `callbacks` that is not None, in turn, with the same arguments."""
    live = [c for c in callbacks if c is not None]
    if len(live) == 1:
        return live[0]

    def call(*args):
        for c in live:
            c(*args)

    return call


def live_export(args, run_dir):
    """The `LiveExport` for `--mlflow`/`--tensorboard`, or None when neither was given."""
    from launcher.export.targets import wants_export

    if not wants_export(args):
        return None
    from launcher.export.live import LiveExport

    return LiveExport(run_dir.path, mlflow=args.mlflow, mlflow_experiment=args.mlflow_experiment,
                      tensorboard=args.tensorboard, on_notice=err)
