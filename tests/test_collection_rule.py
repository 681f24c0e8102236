"""tests/conftest.py's collection rule, run for real: pytest in a scratch project holding a copy of it.

A module that cannot be imported here (it raises at import, as a verl test module does without verl) must
be left out when `-m` deselects its marker — collection is clean — and must still fail loudly when no `-m`
is given (`make test`), or when the expression could select one of its tests.
"""

from __future__ import annotations

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
