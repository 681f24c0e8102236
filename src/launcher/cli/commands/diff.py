"""`launcher diff RUN_A RUN_B`: the differences between two runs in spec, image and verl config."""

from __future__ import annotations

import argparse

from launcher.cli.common import add_output_argument, mark_completion

HELP = "show what differs between two runs: spec keys (with the verl keys they set), image digests, verl config"
DESCRIPTION = (
    "Compares two run directories (or job names under --runs-dir): the resolved spec.yaml key by key (the "
    "experiment name is the runs' identity, shown in the header), each differing key with the verl overrides it "
    "changes, the image each spec names and the imageIDs its pods ran (images.json), and the config verl printed "
    "at start (verl_config.json). Exits 0 whether or not they differ."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name in ("run_a", "run_b"):
        mark_completion(parser.add_argument(name, metavar=name.upper(), help="run directory or job name"), "dir")
    parser.add_argument("--runs-dir", metavar="DIR", help="where job names are looked up (default: $LAUNCHER_RUNS_DIR, "
                                                          "else ./runs)")
    add_output_argument(parser, "the differences")


def resolve_run(value: str, runs_dir: str | None):
    """A run directory given as a path, or a job name under the runs root; BadInput when neither exists."""
    from pathlib import Path

    from launcher.errors import BadInput
    from launcher.run.dirs import runs_root

    p = Path(value)
    if p.is_dir():
        return p
    q = runs_root(runs_dir) / value
    if q.is_dir():
        return q
    raise BadInput(f"{value}: expected a run directory or a job name under {runs_root(runs_dir)}, found neither")


def run(args: argparse.Namespace) -> int:
    from launcher.run import diff as rundiff
    from launcher.cli.common import check_format, emit

    fmt = check_format(args.output)
    d = rundiff.compare(resolve_run(args.run_a, args.runs_dir), resolve_run(args.run_b, args.runs_dir))
    if fmt:
        emit({"apiVersion": "grpo-launcher/v1", "kind": "RunDiff", **d}, fmt)
    else:
        print(rundiff.render_text(d), end="")
    return 0
