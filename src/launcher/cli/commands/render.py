"""`launcher render CONFIG`: print the manifests (YAML, or `-o json`), or write one file per object (`-d DIR`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.cli.common import add_config_arguments, check_format, load_from_args, mark_completion

HELP = "render the Kubernetes manifests of a run (YAML to stdout, -o json|yaml, or one file per object with -d DIR)"
FORMATS = ("yaml", "json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    # no `choices=`: a value that is not a format is probably a directory from before -d existed, and the error
    # says so (check_format) instead of argparse's generic one
    parser.add_argument("-o", "--output", metavar="FORMAT", default=None,
                        help="print the objects to stdout in this format: yaml (default) or json (a v1 List)")
    mark_completion(parser.add_argument("-d", "--output-dir", metavar="DIR",
                                        help="write one file per object into DIR instead (NN-kind-name.yaml)"),
                    "dir")
    parser.add_argument(
        "--gitops",
        action="store_true",
        help="GitOps output: no TTL self-deletion (Argo CD/Flux would recreate a job that deleted itself)",
    )


def run(args: argparse.Namespace) -> int:
    from launcher.errors import BadInput

    fmt = check_format(args.output, FORMATS, hint="; to write files into a directory use -d/--output-dir DIR")
    if fmt and args.output_dir:
        raise BadInput(f"-o/--output {fmt} and -d/--output-dir {args.output_dir}: choose one (stdout or files)")
    from launcher.render.manifests import object_filename, render, to_yaml

    spec = load_from_args(args)
    objects = render(spec, gitops=args.gitops)
    if fmt == "json":
        import json

        # kubectl's shape for several objects: one v1 List (what `kubectl apply -f` and `jq` expect)
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
        return 0
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

