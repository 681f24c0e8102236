"""`launcher render`'s on-disk memo (launcher.render_cache): same inputs, same text, no pydantic on a hit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from launcher import render_cache

ROOT = Path(__file__).resolve().parents[1]
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"


def _run(args: list[str], cache: Path, *, probe: bool = False) -> subprocess.CompletedProcess:
    """`launcher ARGS` in a fresh process with its own cache; with probe, stderr's last line says whether
    pydantic was imported."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "KUBECONFIG": "/nonexistent"}
    code = ("import sys; from launcher.cli import main; rc = main(%r); sys.stdout.flush(); "
            "print('pydantic' in sys.modules, file=sys.stderr); sys.exit(rc)" % (args,))
    cmd = [sys.executable, "-c", code] if probe else [sys.executable, "-m", "launcher", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)


def test_a_hit_prints_the_same_text_without_importing_pydantic(tmp_path):
    cache = tmp_path / "cache"
    fresh = _run(["render", str(EXP3), "--no-cache"], cache)
    assert fresh.returncode == 0 and fresh.stdout.startswith("---") or "kind: ConfigMap" in fresh.stdout
    assert not (cache / "grpo-launcher" / "render").exists()  # --no-cache neither reads nor writes
    first = _run(["render", str(EXP3)], cache, probe=True)
    assert first.returncode == 0 and first.stdout == fresh.stdout
    assert first.stderr.strip().splitlines()[-1] == "True"  # a miss renders
    assert len(list((cache / "grpo-launcher" / "render").iterdir())) == 1
    second = _run(["render", str(EXP3)], cache, probe=True)
    assert second.returncode == 0 and second.stdout == fresh.stdout
    assert second.stderr.strip().splitlines()[-1] == "False"  # a hit: no model built
    as_json = _run(["render", str(EXP3), "-o", "json"], cache)
    assert json.loads(as_json.stdout)["kind"] == "List"  # the format is part of the key
    assert _run(["render", str(EXP3), "-o", "json"], cache).stdout == as_json.stdout


def test_every_input_is_part_of_the_key(tmp_path):
    cache = tmp_path / "cache"
    cfg = tmp_path / "exp.yaml"
    shutil.copy(EXP3, cfg)
    base = _run(["render", str(cfg)], cache).stdout
    assert "kind: PyTorchJob" in base
    assert "kind: RayJob" in _run(["render", str(cfg), "--backend", "rayjob"], cache).stdout
    assert "ttlSecondsAfterFinished" not in _run(["render", str(cfg), "--gitops"], cache).stdout.split(
        "kind: PyTorchJob")[-1]
    with_set = _run(["render", str(cfg), "--set", "rollout.n=4"], cache).stdout
    assert with_set != base
    cfg.write_text(cfg.read_text().replace("\nname: grpo-exp3\n", "\nname: grpo-exp9\n"))  # same path, new content
    changed = _run(["render", str(cfg)], cache).stdout
    assert changed != base and "grpo-exp9" in changed
    assert changed == _run(["render", str(cfg), "--no-cache"], cache).stdout


def test_a_failed_render_is_not_stored_and_still_exits_2(tmp_path):
    cache = tmp_path / "cache"
    for _ in range(2):
        out = _run(["render", str(EXP3), "--set", "rollout.n=0"], cache)
        assert out.returncode == 2 and "rollout.n" in out.stderr
    store = cache / "grpo-launcher" / "render"
    assert not store.exists() or not list(store.iterdir())


def test_an_unusable_cache_falls_back_to_rendering(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")  # $XDG_CACHE_HOME is a file: nothing can be read or written
    out = _run(["render", str(EXP3)], blocker)
    assert out.returncode == 0 and "kind: PyTorchJob" in out.stdout
    cache = tmp_path / "c2"
    _run(["render", str(EXP3)], cache)
    [entry] = (cache / "grpo-launcher" / "render").iterdir()
    entry.write_bytes(b"\xff\xfe not utf-8")  # a damaged entry is a miss, not an error
    again = _run(["render", str(EXP3)], cache)
    assert again.returncode == 0 and "kind: PyTorchJob" in again.stdout


def test_code_changes_change_the_key(tmp_path, monkeypatch):
    pkg = tmp_path / "launcher"
    shutil.copytree(Path(render_cache.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(render_cache, "_PACKAGE", pkg)
    monkeypatch.setattr(render_cache, "_code_digest", None)
    k1 = render_cache.key(str(EXP3), [], None, False, "yaml")
    monkeypatch.setattr(render_cache, "_code_digest", None)
    (pkg / "templates" / "pytorchjob.yaml.j2").write_text((pkg / "templates" / "pytorchjob.yaml.j2").read_text() + " ")
    k2 = render_cache.key(str(EXP3), [], None, False, "yaml")
    assert k1 and k2 and k1 != k2
    assert render_cache.key(str(EXP3), ["rollout.n=4"], None, False, "yaml") != k2


def test_pipes_and_missing_files_are_not_keyed(tmp_path):
    r, w = os.pipe()
    try:
        os.write(w, EXP3.read_bytes()[:100])
        assert render_cache.key(f"/proc/self/fd/{r}", [], None, False, "yaml") is None
        assert os.read(r, 10)  # the pipe was not consumed
    finally:
        os.close(r)
        os.close(w)
    assert render_cache.key(str(tmp_path / "missing.yaml"), [], None, False, "yaml") is None
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (render_cache.MAX_CONFIG_BYTES + 1))
    assert render_cache.key(str(big), [], None, False, "yaml") is None
