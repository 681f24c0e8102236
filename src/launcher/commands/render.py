"""`launcher render CONFIG`: print the manifests (or write one file per object with -o DIR)."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.commands._common import add_config_arguments, load_from_args

HELP = "render the Kubernetes manifests of a run (YAML to stdout, or -o DIR)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("-o", "--output-dir", metavar="DIR", help="write one file per object into DIR")
    parser.add_argument(
        "--gitops",
        action="store_true",
        help="GitOps output: no TTL self-deletion (Argo CD/Flux would recreate a job that deleted itself)",
    )


def run(args: argparse.Namespace) -> int:
    from launcher.render import object_filename, render, to_yaml

    spec = load_from_args(args)
    objects = render(spec, gitops=args.gitops)
    if not args.output_dir:
        print(to_yaml(objects), end="")
        return 0
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("[0-9][0-9]-*.yaml"):
        stale.unlink()  # a re-render must not leave objects of an older config behind
    for index, obj in enumerate(objects):
        (out / object_filename(obj, index)).write_text(to_yaml([obj]))
    print(f"wrote {len(objects)} object(s) to {out}/")
    return 0
