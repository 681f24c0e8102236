"""`python -m launcher`: kubectl-like verbs over one experiment spec.

Verbs live in `launcher.commands.<module>` (see `commands.VERBS`). A verb module keeps its top-level
imports light (argparse, typing) and imports heavy libraries inside `run`, so `--help`, `render`
and `validate` start fast and never load the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

from launcher import __version__
from launcher.commands import VERBS
from launcher.errors import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, LauncherError, exit_codes_epilog


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's wrapping, except that text with its own line breaks (the exit code table) is kept as is."""

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _verb_modules():
    for verb, mod in VERBS.items():
        name = f"launcher.commands.{mod}"
        if importlib.util.find_spec(name) is not None:
            yield verb, importlib.import_module(name)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser: one sub-command per available verb module."""
    epilog = exit_codes_epilog()
    parser = argparse.ArgumentParser(
        prog="launcher",
        description="Run verl GRPO experiments on Kubernetes (Kubeflow PyTorchJob or KubeRay RayJob).",
        epilog=epilog,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"launcher {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, module in _verb_modules():
        p = sub.add_parser(verb, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           epilog=epilog, formatter_class=_HelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv`, run the verb, and return its exit code (see `launcher.errors`)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader of stdout left (`launcher schema | head`): as coreutils do, stop quietly with 128+SIGPIPE.
        # Point stdout at /dev/null so the interpreter's final flush does not raise the same error again.
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad flags, 0 on --help
        sys.stdout.flush()  # --help into a closed pipe: raise BrokenPipeError here, not at exit
        return int(exc.code or 0)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        rc = int(args._run(args) or 0)
        sys.stdout.flush()  # buffered output still to write belongs to this verb: a broken pipe is caught above
        return rc
    except LauncherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (a test's capture): nothing to do
        pass
