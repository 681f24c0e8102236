"""`launcher logs NAME`: every pod's log, prefixed per pod, saved under runs/<job>/logs; `-f` follows."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_run_arguments
from launcher.cli.watchdog import add_watchdog_arguments

HELP = "show or follow a run's pod logs (saved under runs/<job>/logs, metrics into runs/<job>/metrics.jsonl)"
DESCRIPTION = (
    "Finds the run's pods by label (RayJob: the submitter pod, which carries the verl driver's output, and the Ray "
    "pods), waits through Pending, follows every pod with a [pod] prefix, re-attaches after a dropped stream or a "
    "container restart without duplicating or losing lines, and stops when the job is finished. Each pod's raw log "
    "is appended to runs/<job>/logs/<pod>.log and metric lines go to runs/<job>/metrics.jsonl/.csv."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("-f", "--follow", action="store_true", help="follow until the job finishes")
    parser.add_argument("--pod", action="append", default=[], metavar="POD",
                        help="only this pod (full name or short name like master-0, or node-0 for a TrainJob; repeatable)")
    parser.add_argument("-c", "--container", help="container to read (default: the training container)")
    add_watchdog_arguments(parser)
    from launcher.export.targets import add_export_arguments

    add_export_arguments(parser, live=True)


def run(args: argparse.Namespace) -> int:
    from launcher.cli.cluster import err, follow_watched, live_export, open_run
    from launcher.cli.watchdog import config_from_args
    from launcher.errors import BadInput
    from launcher.export.targets import check_export_arguments, wants_export
    from launcher.kube import jobs as J

    check_export_arguments(args)  # bad flags: exit 2 before any cluster call
    if wants_export(args) and not args.follow:
        raise BadInput("--mlflow/--tensorboard: expected --follow with them (or use `launcher export RUN_DIR`)")
    if args.follow:
        config_from_args(args)  # bad watchdog flags: exit 2 before any cluster call
    kube, ref, run_dir = open_run(args)
    if args.follow:
        return follow_watched(args, kube, ref, run_dir, container=args.container, pods=args.pod or None,
                              export=live_export(args, run_dir))
    # Not following: fetch what is new into the run dir, then print the saved logs (complete even after the
    # pods are gone, and identical to what a follower saved).
    from launcher.run.follow import LogFollower
    from launcher.cli.progress import print_line

    follower = LogFollower(kube, ref, run_dir, container=args.container, pods=args.pod or None, on_notice=err)
    result = follower.run(follow=False)
    for e in result.errors:
        err(f"warning: {e}")
    pods = {p["metadata"]["name"]: J.short_name(p, ref.name) for p in J.job_pods(kube, ref)}
    wanted = set(args.pod or [])
    for path in sorted(run_dir.logs.glob("*.log")):
        pod = path.name[:-4]
        short = pods.get(pod, pod)
        if wanted and pod not in wanted and short not in wanted:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                print_line(short, line.rstrip("\n"))
    return 0
