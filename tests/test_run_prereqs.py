"""`make run`'s prerequisite check (`hack/run-main-job.sh --check-prereqs`): Go, npm and Python are checked
before anything is installed or built, and each missing piece is named with what to install.

The script runs for real with a PATH holding only what each case provides: symlinks to this machine's bash
and coreutils, and stand-in `go`/`npm`/`python3` scripts that report a chosen version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "run-main-job.sh"
BASICS = ("bash", "dirname", "sort", "env")


def _bin(tmp_path: Path, *, go: str | None, npm: bool, python: str | None = "real") -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for tool in BASICS:
        os.symlink(shutil.which(tool), d / tool)
    if python == "real":
        os.symlink(sys.executable, d / "python3")
    elif python is not None:  # a stand-in that reports this version and fails the version test
        (d / "python3").write_text(f"#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python {python}'\nexit 1\n")
    if go is not None:
        (d / "go").write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'env GOVERSION' ] && echo go{go}\n")
    if npm:
        (d / "npm").write_text("#!/bin/sh\nexit 0\n")
    for f in d.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return d


def _check(bin_dir: Path, kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent)}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    return subprocess.run([str(bin_dir / "bash"), str(SCRIPT), "--check-prereqs"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_everything_present_passes(tmp_path):
    r = _check(_bin(tmp_path, go="1.26.8", npm=True))
    assert r.returncode == 0, r.stderr
    assert "prerequisites present" in r.stdout


def test_missing_go_and_npm_are_both_named_with_what_to_install(tmp_path):
    r = _check(_bin(tmp_path, go=None, npm=False))
    assert r.returncode == 2
    assert "nothing was installed or built" in r.stderr
    assert "Go >= 1.26: 'go' not found" in r.stderr and "https://go.dev/dl/" in r.stderr
    assert "npm: not found" in r.stderr and "apt-get install npm" in r.stderr


@pytest.mark.parametrize("version", ["1.25.9", "1.9", ""])
def test_too_old_go_is_refused(tmp_path, version):
    r = _check(_bin(tmp_path, go=version, npm=True))
    assert r.returncode == 2
    assert "Go >= 1.26: 'go' is " in r.stderr


@pytest.mark.parametrize("version", ["1.26.0", "1.26.8", "1.30.1"])
def test_new_enough_go_is_accepted(tmp_path, version):
    assert _check(_bin(tmp_path, go=version, npm=True)).returncode == 0


def test_old_python_is_refused(tmp_path):
    r = _check(_bin(tmp_path, go="1.26.8", npm=True, python="3.10.12"))
    assert r.returncode == 2
    assert "Python >= 3.11: 'python3' is Python 3.10.12" in r.stderr


def test_with_kubeconfig_go_and_npm_are_not_needed(tmp_path):
    # a cluster of the user's: nothing is built, so only Python is required
    r = _check(_bin(tmp_path, go=None, npm=False), kubeconfig=str(tmp_path / "kubeconfig"))
    assert r.returncode == 0, r.stderr
