"""`python -m launcher`: kubectl-like verbs over one experiment spec.

Verbs live in `launcher.commands.<module>` (see `commands.VERBS`). A verb module keeps its top-level
imports light (argparse, typing) and imports heavy libraries inside `run`, so `--help`, `render`
and `validate` start fast and never load the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from launcher import __version__
from launcher.commands import VERBS
from launcher.errors import EXIT_BAD_INPUT, LauncherError


def _verb_modules():
    for verb, mod in VERBS.items():
        name = f"launcher.commands.{mod}"
        if importlib.util.find_spec(name) is not None:
            yield verb, importlib.import_module(name)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser: one sub-command per available verb module."""
    parser = argparse.ArgumentParser(
        prog="launcher",
        description="Run verl GRPO experiments on Kubernetes (Kubeflow PyTorchJob or KubeRay RayJob).",
    )
    parser.add_argument("--version", action="version", version=f"launcher {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, module in _verb_modules():
        p = sub.add_parser(verb, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser




def main(argv: list[str] | None = None) -> int:
    """Parse `argv`, run the verb, and return its exit code (see `launcher.errors`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad flags, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args._run(args) or 0)
    except LauncherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
