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


def connect(args: argparse.Namespace, namespace: str | None = None):
    """The `Kube` seam for these flags; nothing is sent until the first request."""
    from launcher.kube import Kube

    return Kube.connect(args.kubeconfig, args.context, args.namespace or namespace)


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def spec_total_steps(run_dir) -> int | None:
    """trainer.total_training_steps from a run's saved spec.yaml, if there is one."""
    import yaml

    try:
        data = yaml.safe_load(run_dir.spec.read_text(encoding="utf-8")) or {}
        return int(data["trainer"]["total_training_steps"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return None


def follow_run(kube, ref, run_dir, *, total_steps=None, container=None, pods=None, follow=True,
               stream_hook=None, quiet_lines=False, watch=None, export=None):
    """Follow a run's logs with the progress display; returns the `FollowResult`.

    `watch` (a `_watchdog.WatchSession`) sees every step and status; `export` (a
    `launcher.export.live.LiveExport`) receives the new steps as they arrive and sends the rest when the
    follow ends.
    """
    from launcher.follow import LogFollower
    from launcher.progress import RunProgress, print_line

    progress = RunProgress(ref.name, total_steps or spec_total_steps(run_dir))
    try:
        with progress:
            follower = LogFollower(
                kube, ref, run_dir, container=container, pods=pods,
                on_line=(lambda p, line: None) if quiet_lines else print_line,
                on_records=chain(progress.records, watch and watch.records, export and export.on_records),
                on_notice=err, on_status=chain(progress.status, watch and watch.status), stream_hook=stream_hook)
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
