"""`launcher list`: the launcher's runs in a namespace (or every namespace, `-A`) with state, age and experiment."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import add_output_argument

HELP = "list the launcher's runs in a namespace, or in all of them with -A (state, age, experiment)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser, runs_dir=False)
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="list runs in every namespace (as kubectl; adds a NAMESPACE column)")
    parser.add_argument("--experiment", "-e", help="only runs of this experiment")
    add_output_argument(parser, "the runs (a RunList)")


def run(args: argparse.Namespace) -> int:
    from launcher.cli.cluster import connect
    from launcher.cli.common import API_VERSION, check_format, emit, run_object
    from launcher.errors import BadInput
    from launcher.kube import jobs as J

    fmt = check_format(args.output)
    if args.all_namespaces and args.namespace:
        raise BadInput(f"-A/--all-namespaces and -n/--namespace {args.namespace}: choose one")
    kube = connect(args)
    runs = J.list_runs(kube, experiment=args.experiment, all_namespaces=args.all_namespaces)
    runs.sort(key=lambda r: (r.obj.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
    states = [J.job_state(r.backend, r.obj) for r in runs]
    if fmt:
        emit({"apiVersion": API_VERSION, "kind": "RunList",
              "items": [run_object(r, kube.namespace, st) for r, st in zip(runs, states)]}, fmt)
        return 0
    if not runs:
        print("no runs in any namespace" if args.all_namespaces else f"no runs in namespace {kube.namespace}")
        return 0
    head = ("NAME", "BACKEND", "STATE", "AGE", "EXPERIMENT")
    rows = [(("NAMESPACE",) if args.all_namespaces else ()) + head]
    for r, st in zip(runs, states):
        md = r.obj.get("metadata") or {}
        ns = (md.get("namespace") or kube.namespace,) if args.all_namespaces else ()
        rows.append(ns + (r.name, r.backend, st.phase, J.age(md.get("creationTimestamp")), r.experiment or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0
