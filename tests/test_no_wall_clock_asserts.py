"""No test asserts an upper bound on elapsed wall-clock time: the suite must pass on a busy machine, and speed is
a benchmark's figure (bench/). A hang is bounded by pytest-timeout marks and subprocess timeouts, which fail a
stuck test without claiming how fast a healthy one is.

The rule is read from the tests' syntax: an `assert` whose comparison puts a clock reading (time.monotonic(),
time.time(), time.perf_counter()) or a name computed from one on the small side of `<`/`<=` (or the large side of
`>`/`>=`) is refused.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns"}


def _reads_clock(node: ast.AST, durations: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in CLOCKS \
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "time":
            return True
        if isinstance(sub, ast.Name) and sub.id in durations:
            return True
    return False


def violations(source: str) -> list[int]:
    """Line numbers of asserts that bound a clock reading from above."""
    tree = ast.parse(source)
    durations = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Sub)
                 and _reads_clock(node.value, set())
                 for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            sides = [cmp.left, *cmp.comparators]
            for i, op in enumerate(cmp.ops):
                small = sides[i] if isinstance(op, (ast.Lt, ast.LtE)) else \
                    sides[i + 1] if isinstance(op, (ast.Gt, ast.GtE)) else None
                if small is not None and _reads_clock(small, durations):
                    found.append(node.lineno)
    return sorted(set(found))


def test_the_rule_catches_the_shapes_it_names():
    assert violations("import time\nt0 = time.monotonic()\nassert time.monotonic() - t0 < 8\n") == [3]
    assert violations("import time\nt0 = time.time()\ntook = time.time() - t0\nassert took <= 60, 'x'\n") == [4]
    assert violations("import time\nt0 = time.monotonic()\nelapsed = time.monotonic() - t0\n"
                      "assert 120 > elapsed\n") == [4]
    # a lower bound (the wait happened) and a deadline loop are fine
    assert violations("import time\nt0 = time.monotonic()\nwaited = time.monotonic() - t0\n"
                      "assert waited >= 2\nwhile time.monotonic() < t0 + 5:\n    pass\n") == []


def test_no_test_bounds_elapsed_time_from_above():
    found = {str(p.relative_to(TESTS)): v for p in sorted(TESTS.rglob("*.py"))
             if p.name != Path(__file__).name and (v := violations(p.read_text(encoding="utf-8")))}
    assert not found, f"wall-clock upper bounds in tests (move the figure to bench/): {found}"
