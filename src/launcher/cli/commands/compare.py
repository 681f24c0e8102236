"""`launcher compare RUN_DIR RUN_DIR [...]`: runs side by side."""

from __future__ import annotations

import argparse

from launcher.cli.common import add_report_arguments, check_output_dir, write_report_files
from pathlib import Path

HELP = "compare runs: headline figures, config differences and overlaid plots"
DESCRIPTION = (
    "Compare two or more run directories: a table of headline figures over each run's steady window "
    "(all but the first --warmup-steps), the config fields that differ, and overlaid per-step plots. "
    "Writes compare.md, compare.json and PNGs into -o DIR (default: compare-<A>-vs-<B> next to the first run)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of the `compare` verb."""
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="two or more run directories (or job names)")
    add_report_arguments(parser, window="each steady window", doc="compare.json", instead="a table",
                         out="where to write the comparison")


def _default_out(runs) -> Path:
    """`compare-<A>-vs-<B>` beside the first run, so comparisons land in the runs directory."""
    names = "-vs-".join(r.path.resolve().name for r in runs[:4])
    return Path(runs[0].path).resolve().parent / f"compare-{names}"


def run(args: argparse.Namespace) -> int:
    """Load every run, write the comparison, print the headline table (or JSON with --json)."""
    from launcher.errors import BadInput

    if len(args.run_dirs) < 2:
        raise BadInput(f"compare needs at least two run directories, got {len(args.run_dirs)}")

    from launcher.report.build import dumps
    from launcher.report.compare import ROWS, write_compare
    from launcher.report.load import load_run
    from launcher.report.markdown import num

    runs = [load_run(d) for d in args.run_dirs]
    out_dir = Path(check_output_dir(args.output_dir)) if args.output_dir else _default_out(runs)
    doc, written = write_report_files(lambda *a, **kw: write_compare(runs, *a, **kw), args, out_dir, "the comparison")
    if args.json:
        print(dumps(doc), end="")
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"steady window (warm-up {args.warmup_steps})")
    table.add_column("figure")
    for r in doc["runs"]:
        table.add_column(r["name"], justify="right")
    for key, label in ROWS:
        table.add_row(label, *(num(r["headline"][key]["mean"]) for r in doc["runs"]))
    table.add_row("zero-signal steps", *(str(len(r["zero_signal_steps"])) for r in doc["runs"]))
    console.print(table)
    for field, values in doc["config_diff"].items():
        console.print(f"config {field}: " + " -> ".join(str(v) for v in values), highlight=False)
    console.print(f"wrote {written['compare.md']}", highlight=False)
    return 0
