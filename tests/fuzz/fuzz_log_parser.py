"""atheris target: the verl log parser never raises, whatever bytes arrive.

Run: python tests/fuzz/fuzz_log_parser.py -runs=1000000 -seed=1 [corpus dir]
Each input is split into lines and fed through the streaming splitter and the line parser, in two
different chunkings, which must agree; and through the pure-Python path, which must give the same records and
counts as the C accelerator's (launcher/metrics/_stepjson.c: a crash there fails the run too).
"""

import sys

import atheris

with atheris.instrument_imports():
    from launcher.metrics import LogParser, parse_line


def one_input(data: bytes) -> None:
    whole = LogParser()
    records = whole.feed(data) + whole.finish()
    split = LogParser()
    mid = len(data) // 2
    again = split.feed(data[:mid]) + split.feed(data[mid:]) + split.finish()
    if [r.step for r in records] != [r.step for r in again]:
        raise AssertionError("chunking changed the parsed steps")
    pure = LogParser(compiled=False)
    reference = pure.feed(data) + pure.finish()
    # repr: nan equals nan, and 1, 1.0 and True differ
    if [(r.step, repr(r.metrics)) for r in records] != [(r.step, repr(r.metrics)) for r in reference] \
            or whole.counters != pure.counters:
        raise AssertionError("the compiled and pure-Python paths differ")
    parse_line(data.decode("utf-8", "replace"))


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()  # libFuzzer prints 'Done N runs' and exits non-zero on any crash


if __name__ == "__main__":
    main()
