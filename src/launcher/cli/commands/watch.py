"""`launcher watch NAME`: follow a run for the watchdog's findings only (stall, collapses, non-finite values)."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_run_arguments
from launcher.cli.common import add_output_argument
from launcher.cli.watchdog import add_watchdog_arguments

HELP = ("watch a run for stalls (each captured as an incident), reward/entropy collapse, clip-ratio jumps and "
        "non-finite loss (--on-stall delete|restart)")
DESCRIPTION = (
    "Follows the run's pods as `logs -f` does (raw logs and metrics saved under runs/<job>/) without printing the "
    "log lines, and prints each watchdog finding once on stdout, with its evidence; every finding is also appended "
    "to runs/<job>/findings.jsonl. A stall is no new step within max(--stall-min, --stall-factor x the median step "
    "time) while the job is Running; it captures an incident (runs/<job>/incidents/: every process's Python "
    "stacks, what hung, the pods' last lines). With --on-stall delete the job is deleted (its PVC kept) and watch "
    "exits 1 with the reason; with --on-stall restart the stuck attempt's pods are deleted so the run resumes from "
    "its newest checkpoint, at most --max-restarts times. Otherwise it exits 0 when the run succeeds and 1 when it "
    "fails."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    add_output_argument(parser, "each finding (one JSON object per line with -o json)")
    add_watchdog_arguments(parser, optional=False)


def run(args: argparse.Namespace) -> int:
    import json

    from launcher.cli.cluster import follow_watched, open_run
    from launcher.cli.common import check_format
    from launcher.cli.watchdog import config_from_args, format_finding

    fmt = check_format(args.output, formats=("json",))
    config_from_args(args)  # exit 2 before any cluster call
    kube, ref, run_dir = open_run(args)

    def emit(f):
        print(json.dumps({"job": ref.name, **f.as_dict()}, sort_keys=True, default=str) if fmt == "json"
              else format_finding(f), flush=True)

    return follow_watched(args, kube, ref, run_dir, emit=emit, quiet_lines=True)
