"""`launcher gitops-status [NAME]`: for the runs that Flux applied, their Kustomization, git source, last apply
and the git revision that created each run (derived from the Kustomization's status.history: launcher.kube.gitops)."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import add_output_argument

HELP = ("show which Flux Kustomization, git source and revision created each run "
        "(derived from Flux's history; NAME: job or experiment)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", nargs="?",
                        help="job name, or experiment name (all its runs); default: every run in the namespace")
    add_cluster_arguments(parser, runs_dir=False)
    add_output_argument(parser, "the runs and what Flux says about them (a GitOpsStatusList)")


def run(args: argparse.Namespace) -> int:
    from launcher.kube import gitops as G
    from launcher.cli.cluster import connect
    from launcher.cli.common import API_VERSION, check_format, emit, run_object
    from launcher.errors import BadInput
    from launcher.kube import jobs as J

    fmt = check_format(args.output)  # bad input: before any cluster call
    kube = connect(args)
    if args.name:
        runs = J.list_runs(kube, experiment=args.name)
        if not runs:
            runs = [J.find_run(kube, args.name)]  # a job name (BadInput when neither)
    else:
        runs = J.list_runs(kube)
    runs.sort(key=lambda r: (r.obj.get("metadata") or {}).get("creationTimestamp") or "", reverse=True)
    installed = G.flux_installed(kube)
    infos = [G.describe(kube, r.obj, installed=installed) for r in runs]
    if fmt:
        items = []
        for r, info in zip(runs, infos):
            item = run_object(r, kube.namespace, J.job_state(r.backend, r.obj))
            item["gitops"] = {k: v for k, v in info.items() if k not in ("line", "lines")}
            items.append(item)
        emit({"apiVersion": API_VERSION, "kind": "GitOpsStatusList", "fluxInstalled": installed, "items": items}, fmt)
        return 0
    if not installed:
        print(f"Flux is not installed: the cluster serves no {G.KS_GROUP}/{G.KS_VERSION} Kustomization")
    if not runs:
        if args.name:
            raise BadInput(f"no run named {args.name!r} in namespace {kube.namespace}")
        print(f"no runs in namespace {kube.namespace}")
        return 0
    for r, info in zip(runs, infos):
        md = r.obj.get("metadata") or {}
        print(f"{r.resource.kind} {r.name}  experiment {r.experiment or '-'}  created {md.get('creationTimestamp') or '?'}")
        for line in info["lines"]:
            print(f"  {line}")
    return 0
