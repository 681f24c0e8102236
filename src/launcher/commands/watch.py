"""`launcher watch NAME`: follow a run for the watchdog's findings only (stall, collapses, non-finite values)."""

from __future__ import annotations

import argparse

from launcher.commands._cluster import add_cluster_arguments
from launcher.commands._common import add_output_argument
from launcher.commands._watchdog import add_watchdog_arguments

HELP = "watch a run for stalls, reward/entropy collapse, clip-ratio jumps and non-finite loss (--on-stall delete)"
DESCRIPTION = (
    "Follows the run's pods as `logs -f` does (raw logs and metrics saved under runs/<job>/) without printing the "
    "log lines, and prints each watchdog finding once on stdout, with its evidence; every finding is also appended "
    "to runs/<job>/findings.jsonl. A stall is no new step within max(--stall-min, --stall-factor x the median step "
    "time) while the job is Running; with --on-stall delete the job is deleted (its PVC kept) and watch exits 1 "
    "with the reason. Otherwise it exits 0 when the run succeeds and 1 when it fails."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="job name, or experiment name (its newest run)")
    add_cluster_arguments(parser)
    add_output_argument(parser, "each finding (one JSON object per line with -o json)")
    add_watchdog_arguments(parser, optional=False)


def run(args: argparse.Namespace) -> int:
    import json

    from launcher.commands._cluster import connect, err, follow_run
    from launcher.commands._common import check_format
    from launcher.commands._watchdog import config_from_args, deleted_exit, format_finding, session_for
    from launcher.kube import jobs as J
    from launcher.runs import RunDir

    fmt = check_format(args.output, formats=("json",))
    config_from_args(args)  # exit 2 before any cluster call
    kube = connect(args)
    ref = J.find_run(kube, args.name)
    run_dir = RunDir.of(ref.name, args.runs_dir).ensure()

    def emit(f):
        print(json.dumps({"job": ref.name, **f.as_dict()}, sort_keys=True, default=str) if fmt == "json"
              else format_finding(f), flush=True)

    watch = session_for(args, kube, ref, run_dir, emit=emit)
    result = follow_run(kube, ref, run_dir, quiet_lines=True, watch=watch)
    deleted = deleted_exit(watch)
    if deleted is not None:
        return deleted
    st = result.state
    err(f"{ref.name}: {st.phase}" + (f" ({st.reason})" if st.reason else "")
        + f"; {len(watch.findings)} finding(s) (runs dir: {run_dir.findings})")
    return 1 if st.finished and not st.succeeded else 0
