"""`launcher list`: the launcher's runs in a namespace with state, age and experiment."""

from __future__ import annotations

import argparse

from launcher.commands._cluster import add_cluster_arguments

HELP = "list the launcher's runs in a namespace (state, age, experiment)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser, runs_dir=False)
    parser.add_argument("--experiment", "-e", help="only runs of this experiment")


def run(args: argparse.Namespace) -> int:
    from launcher.commands._cluster import connect
    from launcher.kube import jobs as J

    kube = connect(args)
    runs = J.list_runs(kube, experiment=args.experiment)
    if not runs:
        print(f"no runs in namespace {kube.namespace}")
        return 0
    runs.sort(key=lambda r: (r.obj.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
    rows = [("NAME", "BACKEND", "STATE", "AGE", "EXPERIMENT")]
    for r in runs:
        st = J.job_state(r.backend, r.obj)
        rows.append((r.name, r.backend, st.phase, J.age((r.obj.get("metadata") or {}).get("creationTimestamp")),
                     r.experiment or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0
