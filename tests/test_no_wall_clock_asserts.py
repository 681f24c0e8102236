"""No test asserts an upper bound on elapsed wall-clock time: the suite must pass on a busy machine, and speed is
a benchmark's figure (bench/). A hang is bounded by pytest-timeout marks, subprocess timeouts and polling helpers
that raise TimeoutError ("hang guard: ..."), which fail a stuck test without claiming how fast a healthy one is.

The rule is read from the tests' syntax. A clock reading is a call of time.monotonic(), time.time(),
time.perf_counter() (their _ns forms, time.process_time()), under any name the module gives them (`import time as
t`, `from time import monotonic as m`, `clock = time.monotonic`), or of datetime's now()/utcnow()/today(). A time
point is a name assigned from a clock reading (`t0 = m()`, `deadline = t0 + 30`); an elapsed time is a difference
whose left side is a clock reading or a time point and whose right side is not a fixed offset (`m() - t0`,
`t1 - t0`, `datetime.now(timezone.utc) - start`, and the `.total_seconds()` of one), or a name assigned from one.

Refused: an `assert` whose comparison puts a clock reading or an elapsed time on the small side of `<`/`<=` (the
large side of `>`/`>=`), and an `if` whose comparison is the failure condition the same way round (`if took > 5:
pytest.fail(...)`). A lower bound (the wait happened) and a deadline loop are fine.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns", "time_ns", "process_time"}
NOW = {"now", "utcnow", "today"}  # datetime's clock readings
NUMERIC = {"abs", "round", "int", "float", "min", "max"}  # what keeps an elapsed time one


class Clock:
    """What reads the clock in one module: the names its imports and assignments give clocks, time points and
    elapsed times. Names are taken module-wide (not per function): a name that is a time point anywhere is one
    everywhere, which errs on the side of refusing."""

    def __init__(self, tree: ast.AST):
        self.time_modules, self.functions = {"time"}, set()
        self.datetime_modules, self.datetime_classes = {"datetime"}, {"datetime"}
        for node in ast.walk(tree):
            for alias in node.names if isinstance(node, ast.Import) else ():
                if alias.name == "time":
                    self.time_modules.add(alias.asname or "time")
                elif alias.name == "datetime":
                    self.datetime_modules.add(alias.asname or "datetime")
            for alias in node.names if isinstance(node, ast.ImportFrom) else ():
                if node.module == "time" and alias.name in CLOCKS:
                    self.functions.add(alias.asname or alias.name)
                elif node.module == "datetime" and alias.name == "datetime":
                    self.datetime_classes.add(alias.asname or "datetime")
        assigned = [(_targets(node), node.value) for node in ast.walk(tree)
                    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None]
        self.functions |= {name for names, value in assigned if self._is_clock(value) for name in names}
        self.points: set[str] = set()
        self.elapsed: set[str] = set()
        # to a fixed point: `took = t1 - t0` may come before `t1 = m()` in the file (another function)
        while True:
            known = len(self.points) + len(self.elapsed)
            for names, value in assigned:
                if self.measures(value):
                    self.elapsed |= names
                elif self.is_point(value):
                    self.points |= names
            if len(self.points) + len(self.elapsed) == known:
                return

    def _is_clock(self, func: ast.expr) -> bool:
        """`func` names a clock function (not a call of one)."""
        if isinstance(func, ast.Name):
            return func.id in self.functions
        if not isinstance(func, ast.Attribute):
            return False
        owner = func.value
        if func.attr in CLOCKS and isinstance(owner, ast.Name) and owner.id in self.time_modules:
            return True
        return func.attr in NOW and (
            isinstance(owner, ast.Name) and owner.id in self.datetime_classes
            or isinstance(owner, ast.Attribute) and owner.attr == "datetime"
            and isinstance(owner.value, ast.Name) and owner.value.id in self.datetime_modules)

    def reads(self, node: ast.AST) -> bool:
        """`node` calls a clock somewhere."""
        return any(isinstance(sub, ast.Call) and self._is_clock(sub.func) for sub in ast.walk(node))

    def is_point(self, node: ast.AST) -> bool:
        """`node` is a time point: a clock reading, a name assigned from one, one shifted by an offset
        (`t0 + 30`, `now - timedelta(seconds=3)`), or one as a choice (`start or datetime.now()`, `a if c else m()`)."""
        if isinstance(node, ast.Call):
            return self._is_clock(node.func)
        if isinstance(node, ast.Name):
            return node.id in self.points
        if isinstance(node, ast.BinOp):
            return not self._difference(node) and (
                self.is_point(node.left) or isinstance(node.op, ast.Add) and self.is_point(node.right))
        if isinstance(node, ast.BoolOp):
            return any(self.is_point(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_point(node.body) or self.is_point(node.orelse)
        return False

    def _difference(self, node: ast.BinOp) -> bool:
        """`node` is a time point less another: an elapsed time."""
        return isinstance(node.op, ast.Sub) and self.is_point(node.left) and not _offset(node.right)

    def measures(self, node: ast.AST) -> bool:
        """`node` is an elapsed time: a difference of time points, a name assigned from one, or arithmetic on one
        (`took * 1000`, `round(took)`, `(now - t0).total_seconds()`). Followed through arithmetic only, so a
        call that is merely given a remaining time (`communicate(timeout=deadline - m())`) is no elapsed time."""
        if isinstance(node, ast.Name):
            return node.id in self.elapsed
        if isinstance(node, ast.BinOp):
            return self._difference(node) or self.measures(node.left) or self.measures(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.measures(node.operand)
        if isinstance(node, ast.Attribute):  # (now - t0).seconds
            return self.measures(node.value)
        if isinstance(node, ast.Call):  # (now - t0).total_seconds(), round(took, 1)
            return self.measures(node.func) or isinstance(node.func, ast.Name) and node.func.id in NUMERIC \
                and any(self.measures(a) for a in node.args)
        return False

    def bounds(self, node: ast.AST) -> bool:
        """`node`, held below something, bounds the time taken: a clock reading against a deadline, or an elapsed
        time against a figure."""
        return self.reads(node) or self.measures(node)


def _targets(node: ast.Assign | ast.AnnAssign | ast.NamedExpr) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {sub.id for t in targets for sub in ast.walk(t) if isinstance(sub, ast.Name)}


def _offset(node: ast.expr) -> bool:
    """A fixed offset, not a time point: `now - 5`, `now - timedelta(seconds=3)` are still time points."""
    return isinstance(node, ast.Constant) or isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Name) and node.func.id == "timedelta"
        or isinstance(node.func, ast.Attribute) and node.func.attr == "timedelta")


def _held_below(cmp: ast.Compare, failing: bool) -> Iterator[ast.expr]:
    """The operands a comparison keeps below another: asserted (`a < b`: a) or refused as a failure condition
    (`a > b`: a)."""
    sides = [cmp.left, *cmp.comparators]
    for i, op in enumerate(cmp.ops):
        if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
            yield sides[i] if isinstance(op, (ast.Lt, ast.LtE)) != failing else sides[i + 1]


def _fails_the_test(body: list[ast.stmt]) -> bool:
    """`body` fails the test: pytest.fail(...) or raise AssertionError (a TimeoutError is a hang guard's)."""
    for sub in (s for stmt in body for s in ast.walk(stmt)):
        if isinstance(sub, ast.Call) and (isinstance(sub.func, ast.Attribute) and sub.func.attr == "fail"
                                          or isinstance(sub.func, ast.Name) and sub.func.id == "fail"):
            return True
        if isinstance(sub, ast.Raise) and sub.exc is not None and "AssertionError" in ast.unparse(sub.exc):
            return True
    return False


def violations(source: str) -> list[int]:
    """Line numbers of asserts (and failing ifs) that bound the time taken from above."""
    tree = ast.parse(source)
    clock = Clock(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            test, failing = node.test, False
        elif isinstance(node, ast.If) and _fails_the_test(node.body):
            test, failing = node.test, True
        else:
            continue
        for cmp in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
            if any(clock.bounds(side) for side in _held_below(cmp, failing)):
                found.add(node.lineno)
    return sorted(found)


def test_the_rule_catches_the_shapes_it_names():
    assert violations("import time\nt0 = time.monotonic()\nassert time.monotonic() - t0 < 8\n") == [3]
    assert violations("import time\nt0 = time.time()\ntook = time.time() - t0\nassert took <= 60, 'x'\n") == [4]
    assert violations("import time\nt0 = time.monotonic()\nelapsed = time.monotonic() - t0\n"
                      "assert 120 > elapsed\n") == [4]
    # a lower bound (the wait happened) and a deadline loop are fine
    assert violations("import time\nt0 = time.monotonic()\nwaited = time.monotonic() - t0\n"
                      "assert waited >= 2\nwhile time.monotonic() < t0 + 5:\n    pass\n") == []


def test_the_rule_follows_clocks_under_other_names():
    assert violations("from time import monotonic as m\nt0 = m()\nassert m() - t0 < 5\n") == [3]
    assert violations("from time import monotonic\nt0 = monotonic()\nelapsed = monotonic() - t0\n"
                      "assert elapsed < 5\n") == [4]
    assert violations("from time import perf_counter\nt0 = perf_counter()\nt1 = perf_counter()\n"
                      "assert t1 - t0 <= 2\n") == [4]  # a difference of two time points
    assert violations("import time as _t\nclock = _t.monotonic\nt0 = clock()\nms = (clock() - t0) * 1000\n"
                      "assert 0 <= ms < 50\n") == [5]
    assert violations("def later():\n    assert took < 5\n"  # assigned further down the module
                      "def first():\n    took = end - t0\n    end = time.time()\n") == [2]
    assert violations("import time\nt0 = start or time.time()\nt1 = time.time() if now is None else now\n"
                      "assert t1 - t0 < 5\n") == [4]


def test_the_rule_catches_datetime_differences():
    assert violations("from datetime import datetime, timedelta\nstart = datetime.now()\n"
                      "assert datetime.now() - start < timedelta(seconds=5)\n") == [3]
    assert violations("import datetime as dt\nt0 = dt.datetime.now(dt.timezone.utc)\n"
                      "assert (dt.datetime.now(dt.timezone.utc) - t0).total_seconds() < 30\n") == [3]
    assert violations("from datetime import datetime as D, timezone\nt0 = D.now(timezone.utc)\n"
                      "took = (D.now(timezone.utc) - t0).total_seconds()\nassert took < 30\n") == [4]
    assert violations("import datetime\nstart = datetime.datetime.utcnow()\n"
                      "if (datetime.datetime.utcnow() - start).seconds > 10:\n    pytest.fail('slow')\n") == [3]


def test_the_rule_catches_a_failing_if():
    assert violations("import time\nt0 = time.monotonic()\ntook = time.monotonic() - t0\n"
                      "if took > 5:\n    pytest.fail('too slow')\n") == [4]
    assert violations("import time\nif time.monotonic() >= deadline:\n    raise AssertionError('late')\n") == [2]


def test_the_rule_leaves_hang_guards_orderings_and_data_alone():
    # a hang guard raises TimeoutError; a deadline loop polls; neither claims how fast a healthy run is
    assert violations("import time\ndeadline = time.monotonic() + 60\nwhile time.monotonic() < deadline:\n"
                      "    pass\nif time.monotonic() > deadline:\n    raise TimeoutError('hang guard')\n") == []
    # a lower bound on a datetime difference; two time points in order; a time point shifted back
    assert violations("from datetime import datetime, timedelta\nt0 = datetime.now()\n"
                      "assert (datetime.now() - t0).total_seconds() >= 2\nt1 = datetime.now()\nassert t0 < t1\n"
                      "before = datetime.now() - timedelta(seconds=3)\nassert before < event\n") == []
    # durations the code under test reports (data, not this test's clock) may be bounded
    assert violations("rec = load()\nassert rec['end'] - rec['start'] < 5\nassert timing_s < 3\n") == []
    # a name that merely mentions the clock is neither a time point nor an elapsed time
    assert violations("import time\ndeadline = time.monotonic() + 60\nname = f'probe-{int(time.time())}'\n"
                      "assert len(name) - 1 < 63\n"
                      "out, err = p.communicate(timeout=max(deadline - time.monotonic(), 5))\n"
                      "assert len(err) < 100\n") == []


def test_no_test_bounds_elapsed_time_from_above():
    found = {str(p.relative_to(TESTS)): v for p in sorted(TESTS.rglob("*.py"))
             if p.name != Path(__file__).name and (v := violations(p.read_text(encoding="utf-8")))}
    assert not found, f"wall-clock upper bounds in tests (move the figure to bench/): {found}"
