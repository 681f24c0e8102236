"""`launcher report RUN_DIR`: the experiment write-up, generated from the run's metrics."""

from __future__ import annotations

import argparse

from launcher.cli.common import add_report_arguments, check_output_dir, write_report_files

HELP = "write report.md, report.json and plots for a run from its metrics.jsonl"
DESCRIPTION = (
    "Summarise a run directory's metrics.jsonl: per-metric statistics over all training steps and over "
    "the steady window (all but the first --warmup-steps), total and per-GPU throughput, the correlation "
    "of reward with truncation, zero-signal steps (grad norm exactly 0) and recommended config changes. "
    "Writes report.md, report.json and PNG plots into RUN_DIR (or -o DIR)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of the `report` verb."""
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="run directory holding metrics.jsonl (or a job name under runs/)"
    )
    add_report_arguments(parser, window="the steady window", doc="report.json", instead="a summary",
                         out="where to write the report (default RUN_DIR)")
    parser.add_argument("--eval", metavar="EVAL_RUN_DIR", dest="eval_dir",
                        help="add the GSM8K evaluation section from an eval run (`launcher eval`): its run dir or "
                             "eval.json (a run dir holding eval.json gets the section without this flag)")


def run(args: argparse.Namespace) -> int:
    """Build and write the report; print a summary table (or the JSON document with --json)."""
    from pathlib import Path

    from launcher.errors import BadInput

    from launcher.report.build import dumps, write_report
    from launcher.report.load import load_run

    run_ = load_run(args.run_dir)
    out_dir = Path(check_output_dir(args.output_dir)) if args.output_dir else run_.path
    extra = []
    if args.eval_dir:
        from launcher.report.eval import eval_section
        from launcher.report.load import resolve_run_dir

        eval_path = Path(args.eval_dir) if Path(args.eval_dir).is_file() else resolve_run_dir(args.eval_dir)
        if eval_path.resolve() != run_.path.resolve():  # the run's own eval.json is added by its provider
            section = eval_section(eval_path)
            if section is None:
                raise BadInput(f"--eval {args.eval_dir}: no eval.json there and no [eval] markers in its logs")
            extra.append(section)
    doc, written = write_report_files(lambda *a, **kw: write_report(run_, *a, extra_sections=extra, **kw), args,
                                      out_dir, "the report")
    if args.json:
        print(dumps(doc), end="")
        return 0
    print_summary(doc, written)
    return 0


def print_summary(doc: dict, written: dict) -> None:
    """A short terminal summary: headline table, zero-signal steps, recommendations, files."""
    from rich.console import Console
    from rich.table import Table

    from launcher.report.markdown import HEADLINE, num, stat_of

    console = Console()
    steady, all_ = doc["windows"]["steady"], doc["windows"]["all"]
    table = Table(title=f"{doc['run']['name']}: {doc['training_steps']} training steps, warm-up {doc['warmup_steps']}")
    for col in ("figure", "steady mean", "std", "n", "all mean"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for key, label in HEADLINE:
        s, a = stat_of(steady, key), stat_of(all_, key)
        table.add_row(label, num(s.get("mean")), num(s.get("std")), str(s.get("n", 0)), num(a.get("mean")))
    console.print(table)
    zs, frac = doc["zero_signal_steps"], doc.get("zero_signal_fraction")
    if frac is not None:
        console.print(f"zero-signal steps: {len(zs)} ({frac:.0%})" + (f": {', '.join(map(str, zs))}" if zs else ""))
    for rec in doc["recommendations"]:
        change = ", ".join(f"{k}={v}" for k, v in rec["change"].items())
        console.print(f"[bold]{rec['id']}[/bold] ({rec['severity']}): {change}", highlight=False)
    for note in doc["notes"]:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    for name in ("report.md", "report.json"):
        if name in written:
            console.print(f"wrote {written[name]}", highlight=False)
    pngs = [p.name for p in written.values() if p.suffix == ".png"]
    if pngs:
        console.print(f"wrote {len(pngs)} plot(s): {', '.join(pngs)}", highlight=False)
