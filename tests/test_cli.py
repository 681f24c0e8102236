"""The CLI front door: --help on every verb, exit codes, and no cluster call on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.cli import build_parser, main
from launcher.commands import VERBS

ROOT = Path(__file__).resolve().parents[1]
EXP3 = str(ROOT / "configs" / "grpo-exp3.yaml")


def _verbs():
    parser = build_parser()
    return sorted(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse has no public API


def test_every_registered_verb_has_help(capsys):
    verbs = _verbs()
    assert {"render", "validate", "schema"} <= set(verbs)
    assert set(verbs) <= set(VERBS)
    for verb in verbs:
        with pytest.raises(SystemExit) as info:
            build_parser().parse_args([verb, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert f"usage: launcher {verb}" in out


def test_validate_ok_and_bad(capsys):
    assert main(["validate", EXP3]) == 0
    assert "grpo-exp3-" in capsys.readouterr().out
    assert main(["validate", EXP3, "--set", "rollout.n=0"]) == 2
    err = capsys.readouterr().err
    assert "rollout.n: expected a number ≥ 1, got 0" in err


def test_render_stdout_and_dir(tmp_path, capsys):
    assert main(["render", EXP3, "--backend", "rayjob"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "RayJob"]
    assert main(["render", EXP3, "-d", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files[0].startswith("00-configmap-") and files[1].startswith("01-pytorchjob-grpo-exp3-")


def test_render_gitops_drops_ttl(capsys):
    assert main(["render", EXP3, "--set", "run_policy.ttl_seconds_after_finished=3600"]) == 0
    job = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 3600
    assert main(["render", EXP3, "--gitops", "--set", "run_policy.ttl_seconds_after_finished=3600"]) == 0
    job = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    assert "ttlSecondsAfterFinished" not in job["spec"]["runPolicy"]


def test_unknown_verb_and_flag_exit_2():
    assert main(["frobnicate"]) == 2
    assert main(["render"]) == 2  # missing CONFIG


def test_render_and_validate_never_import_the_kubernetes_client():
    code = (
        "import sys; from launcher.cli import main; "
        f"rc = main(['render', {EXP3!r}]); rc2 = main(['validate', {EXP3!r}]); "
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported'; sys.exit(rc or rc2)"
    )
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr


def test_python_dash_m_entry():
    out = subprocess.run([sys.executable, "-m", "launcher", "validate", EXP3, "--set", "name=Bad_Name"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "name: expected a string matching" in out.stderr and "got 'Bad_Name'" in out.stderr
