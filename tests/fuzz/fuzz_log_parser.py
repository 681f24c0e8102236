"""atheris target: the verl log parser never raises, whatever bytes arrive.

Run: python tests/fuzz/fuzz_log_parser.py -runs=1000000 -seed=1 [corpus dir]
Each input is split into lines and fed through the streaming splitter and the line parser, in two
different chunkings, which must agree.
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
    parse_line(data.decode("utf-8", "replace"))


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()  # libFuzzer prints 'Done N runs' and exits non-zero on any crash


if __name__ == "__main__":
    main()
