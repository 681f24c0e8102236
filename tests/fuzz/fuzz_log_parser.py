"""atheris target: the verl log parser never raises, whatever bytes arrive, and reads them as the reference does.

Run: python tests/fuzz/fuzz_log_parser.py -runs=1000000 -seed=1 [corpus dir]
Each input is fed through `LogParser` whole and in two chunks, which must agree; its records and counts must be
the reference's: the bytes split on \\r and \\n, each fragment decoded on its own and read by `_parse` (items one at
a time by `_items`), fragment by fragment. `parse_line` must not raise on any text.
"""

import sys

import atheris

with atheris.instrument_imports():
    from launcher.metrics import LogParser, ParseCounters, parse_line
    from launcher.metrics.parser import _MALFORMED, _parse


def reference(data: bytes) -> tuple[list, ParseCounters]:
    """Records (step, repr of the metrics: nan equals nan, 1, 1.0 and True differ) and counts, line by line."""
    c = ParseCounters()
    records = []
    for piece in data.replace(b"\r", b"\n").split(b"\n"):
        if not piece:
            continue
        c.lines += 1
        try:
            text = piece.decode()
        except UnicodeDecodeError:
            c.non_utf8 += 1
            continue
        rec = _parse(text)
        if rec is None:
            c.noise += 1
        elif rec is _MALFORMED:
            c.malformed += 1
        else:
            records.append((rec.step, repr(rec.metrics)))
    c.records = len(records)
    return records, c


def one_input(data: bytes) -> None:
    whole = LogParser()
    records = [(r.step, repr(r.metrics)) for r in whole.feed(data) + whole.finish()]
    split = LogParser()
    mid = len(data) // 2
    again = [(r.step, repr(r.metrics)) for r in split.feed(data[:mid]) + split.feed(data[mid:]) + split.finish()]
    if records != again or whole.counters != split.counters:
        raise AssertionError("chunking changed the records or the counts")
    want, counts = reference(data)
    if records != want or whole.counters != counts:
        raise AssertionError(f"LogParser and the reference differ: {records} {whole.counters} != {want} {counts}")
    parse_line(data.decode("utf-8", "replace"))


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()  # libFuzzer prints 'Done N runs' and exits non-zero on any crash


if __name__ == "__main__":
    main()
