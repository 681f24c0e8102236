"""The CLI front door: --help on every verb, exit codes, and no cluster call on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.cli.main import build_parser, main
from launcher.cli.commands import VERBS

ROOT = Path(__file__).resolve().parents[2]
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
        "import sys; from launcher.cli.main import main; "
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


def test_help_lines_table_matches_every_verb_module():
    """`launcher --help` lists verbs from commands.HELP_LINES without importing them: it must say what the
    modules say."""
    import importlib

    from launcher.cli.commands import HELP_LINES

    assert list(HELP_LINES) == list(VERBS)
    for verb, module in VERBS.items():
        assert HELP_LINES[verb] == importlib.import_module(f"launcher.cli.commands.{module}").HELP, verb


def _modules_after(argv: list[str]) -> set[str]:
    code = (
        "import sys, json; from launcher.cli.main import main; rc = main(%r); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('launcher', 'pydantic', 'kubernetes', "
        "'numpy', 'rich', 'matplotlib', 'pyarrow', 'jinja2', 'yaml')))))" % (argv,)
    )
    env = {**os.environ, "KUBECONFIG": "/nonexistent", "XDG_CACHE_HOME": "/nonexistent/cache"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    import json

    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_render_and_validate_never_load_the_kubernetes_client():
    """`render` and `validate` validate with pydantic and render with Jinja, like every verb, and touch no cluster."""
    for argv in (["render", EXP3], ["validate", EXP3, "--show-overrides"], ["render", EXP3, "--backend", "rayjob"]):
        mods = _modules_after(argv)
        assert {"pydantic", "launcher.spec.model"} <= mods and "kubernetes" not in mods, (argv, mods)
    assert "jinja2" in _modules_after(["render", EXP3])


def test_help_imports_no_verb_and_a_verb_imports_only_itself():
    mods = _modules_after(["--help"])
    assert not {m for m in mods if m.startswith("launcher.cli.commands.") and m != "launcher.cli.commands"}, mods
    assert not mods & {"pydantic", "kubernetes", "numpy", "rich", "jinja2", "yaml"}, mods
    mods = _modules_after(["validate", EXP3])
    verbs = {m for m in mods if m.startswith("launcher.cli.commands.")}
    assert verbs == {"launcher.cli.commands.validate"}, verbs
    assert not mods & {"kubernetes", "numpy", "rich", "matplotlib", "pyarrow"}, mods
    help_out = subprocess.run([sys.executable, "-m", "launcher", "--help"], capture_output=True, text=True).stdout
    from launcher.cli.commands import HELP_LINES

    flat = " ".join(help_out.split())
    for verb in VERBS:  # every verb is still listed, with its help (argparse wraps it: compare unwrapped)
        assert f" {verb} {HELP_LINES[verb]}" in flat, verb
    assert main(["render", "--help"]) == 0  # and a verb's own --help still has its arguments
