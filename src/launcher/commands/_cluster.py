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
               stream_hook=None, quiet_lines=False, watch=None):
    """Follow a run's logs with the progress display (and `watch`, a `_watchdog.WatchSession`); the `FollowResult`."""
    from launcher.follow import LogFollower
    from launcher.progress import RunProgress, print_line

    progress = RunProgress(ref.name, total_steps or spec_total_steps(run_dir))
    with progress:
        follower = LogFollower(
            kube, ref, run_dir, container=container, pods=pods,
            on_line=(lambda p, line: None) if quiet_lines else print_line,
            on_records=_with(progress.records, watch and watch.records), on_notice=err,
            on_status=_with(progress.status, watch and watch.status), stream_hook=stream_hook)
        result = follower.run(follow=follow)
    for e in result.errors:
        err(f"warning: log follower: {e}")
    return result


def _with(first, second):
    """`first`, or a callback calling `first` then `second` (a watchdog's) with the same arguments."""
    if second is None:
        return first

    def both(*a):
        first(*a)
        second(*a)

    return both
