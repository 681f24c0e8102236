"""Suite-wide collection rule: a module's (or directory's) markers decide whether it is imported at all.

Why: `make unit` runs `pytest -m 'not cluster and not verl and ...'`, but pytest applies `-m` only after it
has imported every test module. A module that needs verl, torch or hydra at import time therefore fails
*collection* on a machine without them, although every test in it would have been deselected. So before a
module is imported, its top-level `pytestmark = ...` is read from the source (AST, nothing imported); when no
test in it could match `-m`, whatever marks its functions add, the module is not collected. A directory
declares marks for everything below it the same way, with a `pytestmark` in its own `conftest.py` (pytest
itself ignores `pytestmark` in a conftest; `pytest_collection_modifyitems` below applies it).

Without `-m` (`make test`, CI) nothing is left out: every module is imported and run, so a missing verl
still fails loudly instead of being skipped. A path named on the command line is always imported too
(pytest never consults `pytest_ignore_collect` for its own arguments); the rule applies to what pytest finds
by walking directories, as `make unit` does.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re
import tempfile
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# More free identifiers than this in a -m expression: too many combinations to prove a module
# deselected, so it is collected as usual (pytest then deselects its tests itself).
_MAX_FREE = 12
_WORDS = re.compile(r"[A-Za-z_][\w.+-]*")
_OPERATORS = {"and", "or", "not", "True", "False"}


@functools.lru_cache(maxsize=None)
def declared_marks(path: Path) -> frozenset[str]:
    """Names of the `pytest.mark.NAME` / `pytest.mark.NAME(...)` in a file's top-level `pytestmark = ...`."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return frozenset()  # let pytest import it and report the problem itself
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) or node.value is None:
            continue
        for sub in ast.walk(node.value):
            # pytest.mark.NAME: Attribute(value=Attribute(value=Name('pytest'), attr='mark'), attr=NAME)
            if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                    and sub.value.attr == "mark" and isinstance(sub.value.value, ast.Name)
                    and sub.value.value.id == "pytest"):
                names.add(sub.attr)
    return frozenset(names)


def inherited_marks(path: Path) -> frozenset[str]:
    """Marks of `path` (a test module or directory) from its own `pytestmark` and every enclosing
    directory's `conftest.py` up to tests/."""
    marks: set[str] = set()
    if path.is_file():
        marks |= declared_marks(path)
    directory = path if path.is_dir() else path.parent
    while directory == HERE or HERE in directory.parents:
        if directory != HERE and (directory / "conftest.py").is_file():
            marks |= declared_marks(directory / "conftest.py")
        directory = directory.parent
    return frozenset(marks)


def can_match(markexpr: str, marks: frozenset[str]) -> bool:
    """Could any test carrying `marks` (plus any other marks) be selected by `-m markexpr`?

    Every identifier of the expression that is not in `marks` is free: a test function may add it. All
    combinations are tried, so the answer is exact for any expression (`not verl or slow` included).
    """
    from _pytest.mark.expression import Expression  # pytest's own parser of -m (no public equivalent)

    try:
        expr = Expression.compile(markexpr)
    except SyntaxError:
        return True  # pytest reports the bad expression itself
    free = sorted({w for w in _WORDS.findall(markexpr) if w not in _OPERATORS} - marks)
    if len(free) > _MAX_FREE:
        return True
    for values in itertools.product((False, True), repeat=len(free)):
        chosen = marks | {name for name, on in zip(free, values) if on}
        if expr.evaluate(lambda name, /, **kwargs: name in chosen):
            return True
    return False


@functools.lru_cache(maxsize=None)
def marked_functions(path: Path, mark: str) -> frozenset[str]:
    """Names of the module-level functions in `path` decorated with `pytest.mark.<mark>` (read from the source)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return frozenset()
    found = set()
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            deco = deco.func if isinstance(deco, ast.Call) else deco
            if (isinstance(deco, ast.Attribute) and deco.attr == mark and isinstance(deco.value, ast.Attribute)
                    and deco.value.attr == "mark"):
                found.add(node.name)
    return frozenset(found)


REALNODE_MARKERS = (
    "smallpods: a realnode test whose pods are small (the smoke workload, plain pods): it runs on a worker of its "
    "own, beside the real verl runs (tests/e2e/realnode_share.py)",
    "wholenodes: a realnode test that needs both real nodes to itself (a pod on each, the host's FORWARD chain, the "
    "kubelet's log rotation): no smallpods test runs meanwhile (tests/e2e/realnode_share.py)",
)
REALNODE_SCOPES = ("realnode", "realnode-smallpods")  # the training worker's scope first: CI's critical path


def scope_of(nodeid: str, rootpath: Path) -> str:
    """The scheduling scope of a test under `--dist loadfile`: its file, except the `realnode` tests (their module's
    marks or their own decorator): those also marked `smallpods` share the scope "realnode-smallpods", the others
    (the real verl runs) the scope "realnode", so that one worker runs each group in turn, the two beside each other
    (tests/e2e/realnode_share.py)."""
    file, _, rest = nodeid.partition("::")
    path = (rootpath / file).resolve()
    function = rest.split("::")[-1].split("[", 1)[0]
    if "realnode" in inherited_marks(path) or function in marked_functions(path, "realnode"):
        if "smallpods" in inherited_marks(path) or function in marked_functions(path, "smallpods"):
            return "realnode-smallpods"
        return "realnode"
    return file


def scope_order(scopes: dict[str, dict]) -> list[str]:
    """The order scopes are handed out: the real-node scopes first (the training one first of all: it is the
    longest), then xdist's own order, the scopes with the most tests first."""
    return sorted(scopes, key=lambda s: (s not in REALNODE_SCOPES,
                                         REALNODE_SCOPES.index(s) if s in REALNODE_SCOPES else 0, -len(scopes[s])))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent where xdist is not installed (.venv-floor)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile` with the real-node tests in two scopes (`scope_of`), handed out first (`scope_order`), and
    the worker of the training scope given nothing else while it lasts; any other mode: xdist's own.

    Done here rather than with `xdist_group` marks: `--dist loadgroup` tags each test by renaming its
    `_nodeid`, which pytest >= 9.2 no longer reads (the groups are silently ignored)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RealNodeTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid, config.rootpath)

        def schedule(self) -> None:
            """xdist's `LoadScopeScheduling.schedule` (3.8), its queue in `scope_order`."""
            if self.collection is not None or not self._check_nodes_have_same_collection():
                return super().schedule()  # a rescheduling, or xdist's own abort on different collections
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return None
            queue: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                queue.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            self.workqueue.update((s, queue[s]) for s in scope_order(queue))
            for _ in range(len(self.nodes) - len(self.workqueue)):  # more workers than scopes
                self.assigned_work.popitem()[0].shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()
            return None

        def _reschedule(self, node) -> None:
            # the training scope's worker takes nothing else until it is done: anything queued behind it would
            # lengthen CI's critical path
            pending = self.assigned_work.get(node, {}).get(REALNODE_SCOPES[0])
            if pending is not None and not all(pending.values()) and self.workqueue:
                return
            super()._reschedule(node)

    return RealNodeTestsTogether(config, log)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave out a module or directory none of whose tests `-m` can select (see the module docstring)."""
    markexpr = config.option.markexpr
    if not markexpr:
        return None
    path = Path(collection_path).resolve()
    if path.is_file() and not (path.name.startswith("test_") and path.suffix == ".py"):
        return None
    if path.is_dir() and not (path / "conftest.py").is_file():
        return None
    marks = inherited_marks(path)
    if marks and not can_match(markexpr, marks):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply the marks a directory's conftest.py declares to every test below it (before `-m` deselects)."""
    for item in items:
        path = Path(str(item.path)).resolve()
        own = declared_marks(path)  # pytest already applied the module's own pytestmark
        for name in sorted(inherited_marks(path) - own):
            item.add_marker(getattr(pytest.mark, name))


def pytest_configure(config: pytest.Config) -> None:
    """The real-node markers (`REALNODE_MARKERS`); the real-run ledger's file and this session's tag
    (tests/real_run_ledger.py), set once in the controlling process so that the pytest-xdist workers it starts
    inherit them; `.ci/run` names the file for all its lanes."""
    import real_run_ledger as ledger

    # here rather than in pyproject.toml's list: the CPU image's committed pins hash pyproject.toml (hack/image/pins.py)
    for line in REALNODE_MARKERS:
        config.addinivalue_line("markers", line)
    if hasattr(config, "workerinput"):
        return
    os.environ.setdefault(ledger.SESSION_ENV, uuid.uuid4().hex)
    if not os.environ.get(ledger.FILE_ENV):
        fd, path = tempfile.mkstemp(prefix="real-runs-", suffix=".jsonl")
        os.close(fd)
        os.environ[ledger.FILE_ENV] = path


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """How many real verl runs this session started and what each took (only sessions that ran cluster tests)."""
    import real_run_ledger as ledger

    if hasattr(config, "workerinput") or not any(
            "cluster" in rep.keywords for reps in terminalreporter.stats.values() for rep in reps
            if hasattr(rep, "keywords")):
        return
    records = ledger.read(os.environ[ledger.FILE_ENV], os.environ[ledger.SESSION_ENV])
    terminalreporter.section("real verl runs (what the real nodes' pods logged)")
    for line in ledger.summary(records):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory):
    """A real MLflow tracking server (tests/mlflow_server.py) on loopback, shared by the session's tests."""
    from mlflow_server import mlflow_server

    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as uri:
        yield uri
