"""`python -m launcher`: kubectl-like verbs over one experiment spec.

Verbs live in `launcher.cli.commands.<module>` (see `commands.VERBS`). Only the module of the verb being
run is imported: the other verbs appear in the parser with their one-line help from
`commands.HELP_LINES`, so `launcher --help` imports no verb at all. A verb module keeps its top-level
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
from launcher.cli.commands import HELP_LINES, VERBS
from launcher.errors import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, LauncherError, exit_codes_epilog


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's wrapping, except that text with its own line breaks (the exit code table) is kept as is.

    Every parser uses it, also to size itself without `shutil`: argparse's own formatter imports shutil (and
    with it zlib, bz2, lzma: ~5 ms of each start) for `get_terminal_size`, on the first `add_argument`."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        if width is None:
            width = _terminal_columns() - 2  # what argparse computes, minus the import
        super().__init__(prog, indent_increment, max_help_position, width)

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _terminal_columns(fallback: int = 80) -> int:
    """`shutil.get_terminal_size().columns`: $COLUMNS, else the terminal of stdout, else `fallback`."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or fallback


def _available(verb: str) -> bool:
    return importlib.util.find_spec(f"launcher.cli.commands.{VERBS[verb]}") is not None


def _module(verb: str):
    return importlib.import_module(f"launcher.cli.commands.{VERBS[verb]}")


def build_parser(verbs=None) -> argparse.ArgumentParser:
    """The argument parser: one sub-command per available verb module.

    `verbs`: the verbs whose arguments are declared (their modules imported); None: all of them (shell
    completion, tests). The others are listed with their one-line help only, which is all `--help` and
    argparse's "invalid choice" message need."""
    epilog = exit_codes_epilog()
    parser = argparse.ArgumentParser(
        prog="launcher",
        description="Run verl GRPO experiments on Kubernetes (Kubeflow PyTorchJob, KubeRay RayJob or Kubeflow Trainer v2 TrainJob).",
        epilog=epilog,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"launcher {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        if not _available(verb):
            continue
        if verbs is not None and verb not in verbs and verb in HELP_LINES:
            sub.add_parser(verb, help=HELP_LINES[verb], formatter_class=_HelpFormatter)
            continue
        module = _module(verb)
        p = sub.add_parser(verb, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           epilog=epilog, formatter_class=_HelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _verb_of(argv: list[str]) -> str | None:
    """The verb named on the command line: the first word that is not an option (the top-level options,
    --help and --version, take no value)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


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
    if argv is None:
        argv = sys.argv[1:]
    # pydantic looks for plugins (observability hooks such as logfire) by scanning every installed distribution's
    # entry points when the first model is built: ~30 ms of each start on a full environment, for hooks that
    # would only trace the launcher's own config checks. A value the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    parser = build_parser([_verb_of(argv)])
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
