"""tests/conftest.py's collection rule, run for real: pytest in a scratch project holding a copy of it.

A module that cannot be imported here (it raises at import, as a verl test module does without verl) must
be left out when `-m` deselects its marker — collection is clean — and must still fail loudly when no `-m`
is given (`make test`), or when the expression could select one of its tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"
LEDGER = Path(__file__).resolve().parent / "real_run_ledger.py"  # the conftest's session summary reads it
INI = """[pytest]
markers =
    verl: needs verl
    slow: slow
    cluster: needs a cluster
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "tests" / "needs_verl").mkdir(parents=True)
    (root / "pytest.ini").write_text(INI)
    shutil.copy(CONFTEST, root / "tests" / "conftest.py")
    shutil.copy(LEDGER, root / "tests" / "real_run_ledger.py")
    # a module marked verl that fails at import time without verl
    (root / "tests" / "test_uses_verl.py").write_text(
        "import pytest\npytestmark = pytest.mark.verl\nraise ImportError('no verl here')\n"
        "def test_x():\n    pass\n")
    # a directory marked verl through its conftest.py, with an unmarked module that fails at import
    (root / "tests" / "needs_verl" / "conftest.py").write_text("import pytest\npytestmark = pytest.mark.verl\n")
    (root / "tests" / "needs_verl" / "test_inside.py").write_text(
        "raise ImportError('no torch here')\ndef test_y():\n    pass\n")
    (root / "tests" / "needs_verl" / "test_fine.py").write_text("def test_fine():\n    pass\n")
    # a module with one slow test and one plain test, importable everywhere
    (root / "tests" / "test_plain.py").write_text(
        "import pytest\ndef test_plain():\n    pass\n@pytest.mark.slow\ndef test_slow():\n    pass\n")
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=root,
                          capture_output=True, text=True, timeout=120)


def test_deselected_markers_are_not_imported(tmp_path):
    r = _pytest(_project(tmp_path), "-m", "not verl and not slow")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout and "error" not in r.stdout.lower()


def test_without_m_every_module_is_imported_and_fails_loudly(tmp_path):
    r = _pytest(_project(tmp_path))
    assert r.returncode != 0
    assert "no verl here" in r.stdout and "no torch here" in r.stdout


@pytest.mark.parametrize("expr", ["verl", "not verl or slow"])
def test_an_expression_that_could_select_them_imports_them(tmp_path, expr):
    r = _pytest(_project(tmp_path), "-m", expr)
    assert r.returncode != 0 and "no verl here" in r.stdout, r.stdout


def test_a_directory_mark_applies_to_its_tests(tmp_path):
    root = _project(tmp_path)
    (root / "tests" / "needs_verl" / "test_inside.py").unlink()
    (root / "tests" / "test_uses_verl.py").unlink()
    r = _pytest(root, "-m", "verl", "--collect-only")
    assert "test_fine.py::test_fine" in r.stdout and "test_plain" not in r.stdout, r.stdout


RECORD = """import os, pathlib, time
def record(name):
    time.sleep(0.3)  # long enough that both workers take work
    with open(os.environ["RECORD_FILE"], "a") as f:
        f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {name}\\n")
"""


def test_loadfile_keeps_modules_whole_and_every_realnode_test_on_one_worker(tmp_path):
    """`--dist loadfile` (make test-cluster-shared) through tests/conftest.py's scheduler: the realnode tests of
    a realnode module and the realnode-decorated test of a mixed module run on one worker, each other module whole."""
    root = _project(tmp_path)
    for p in (root / "tests").rglob("test_*.py"):
        p.unlink()
    (root / "pytest.ini").write_text(INI + "    realnode: needs the real nodes\n")
    tests = root / "tests"
    (tests / "rec.py").write_text(RECORD)
    (tests / "test_real_a.py").write_text(
        "import pytest\nfrom rec import record\npytestmark = [pytest.mark.cluster, pytest.mark.realnode]\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_a(n):\n    record(f'real_a{n}')\n")
    (tests / "test_mixed.py").write_text(
        "import pytest\nfrom rec import record\n@pytest.mark.realnode\ndef test_real():\n    record('mixed_real')\n"
        + "".join(f"def test_plain{i}():\n    record('mixed_plain')\n" for i in range(3)))
    for name in ("one", "two", "three"):
        (tests / f"test_{name}.py").write_text(
            "from rec import record\n" + "".join(f"def test_{i}():\n    record('{name}')\n" for i in range(3)))
    record = tmp_path / "record.txt"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist", "loadfile"],
                       cwd=root, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "RECORD_FILE": str(record), "PYTHONPATH": str(tests)})
    assert r.returncode == 0, r.stdout + r.stderr
    workers: dict[str, set[str]] = {}
    for line in record.read_text().splitlines():
        worker, name = line.split()
        workers.setdefault(name, set()).add(worker)
    real = workers["real_a1"] | workers["real_a2"] | workers["mixed_real"]
    assert len(real) == 1, workers  # every realnode test on one worker
    assert all(len(workers[m]) == 1 for m in ("one", "two", "three", "mixed_plain")), workers  # modules whole
    assert len(set().union(*workers.values())) == 2, workers  # and both workers had work
