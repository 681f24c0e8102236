"""`launcher metrics LOGFILE|- -d DIR`: parse a saved verl log into metrics.jsonl/.csv/.meta.json."""

from __future__ import annotations

import argparse

from launcher.cli.common import add_output_dir_argument, check_output_dir

HELP = "parse a saved verl log (or stdin) into metrics.jsonl, metrics.csv and metrics.meta.json"
DESCRIPTION = (
    "Run the console-metrics parser over a saved pod log (`-` reads stdin) and write metrics.jsonl, "
    "metrics.csv and metrics.meta.json into DIR. Re-running into the same DIR adds nothing twice; "
    "a step logged again with different values replaces the stored row (see metrics.meta.json)."
)

CHUNK = 1 << 20  # read size: memory stays ~CHUNK + one capped line whatever the input size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logfile", metavar="LOGFILE", help="verl/pod log file, or - for stdin")
    add_output_dir_argument(parser, "directory for the metrics files", required=True)
    parser.add_argument("--attempt", default="0", metavar="ID",
                        help="attempt id of this log (e.g. container restartCount); a later attempt's "
                             "values win when it logs a step again (default 0)")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from launcher.errors import BadInput
    from launcher.metrics import LogParser, MetricsSink

    attempt: int | str = int(args.attempt) if args.attempt.lstrip("-").isdigit() else args.attempt
    if args.logfile == "-":
        src = sys.stdin.buffer
    else:
        path = Path(args.logfile)
        if path.is_dir():
            raise BadInput(f"{args.logfile}: is a directory, expected a log file")
        try:
            src = open(path, "rb")
        except OSError as exc:
            raise BadInput(f"{args.logfile}: cannot read: {exc.strerror or exc}") from None
    out = Path(check_output_dir(args.output_dir))
    if out.exists() and not out.is_dir():
        raise BadInput(f"-d {args.output_dir}: exists and is not a directory")
    parser = LogParser()
    try:
        sink = MetricsSink(out, derived_interval_s=float("inf"))
    except OSError as exc:
        raise BadInput(f"-d {args.output_dir}: cannot write: {exc.strerror or exc}") from None
    written = 0
    with sink:
        try:
            first = True
            while chunk := src.read(CHUNK):
                if first and b"\x00" in chunk[:65536]:
                    # A pod log is text; NULs at the start mean a binary file was passed by mistake.
                    raise BadInput(f"{args.logfile}: binary data (NUL bytes); expected a text log")
                first = False
                written += sink.add_many(parser.feed(chunk), attempt)
        except OSError as exc:
            raise BadInput(f"{args.logfile}: read failed: {exc.strerror or exc}") from None
        finally:
            if src is not sys.stdin.buffer:
                src.close()
        written += sink.add_many(parser.finish(), attempt)
        sink.add_counters(parser.counters)
        steps = sink.steps
    c = parser.counters
    skipped = c.malformed + c.non_utf8 + c.truncated
    span = f" (steps {min(steps)}..{max(steps)})" if steps else ""
    print(f"{len(steps)} steps in {out}{span}; {written} rows written, {c.records} metric lines, "
          f"{c.lines} lines read, {skipped} skipped (malformed {c.malformed}, non-UTF-8 {c.non_utf8}, "
          f"truncated {c.truncated})")
    return 0
