"""`reward.function.path: ./my_reward.py`: a reward function from a local file, read into the spec by the loader.

Where the file is looked for (the config file's directory, a `base:` file's own, the working directory for --set),
that its content is part of the hash, what is refused before any API call (missing, oversized, not UTF-8, not
Python, no such function), and what render makes of it (the ConfigMap key, verl's path). verl importing the shipped
file is in tests/verl/test_verl_compose.py; the chart's --set-file in tests/chart/test_chart_parity.py; a real run
scoring with it in tests/e2e/test_real_training_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kube_fakes import cli_api  # noqa: F401 - fixture `api`
from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.render.manifests import render
from launcher.spec.contract import REWARD_FILE_KEY, REWARD_FILE_PATH, SPEC_MOUNT, describe_source
from launcher.spec.load import dump_spec, load_raw, load_spec, spec_from_raw
from launcher.spec.model import MAX_REWARD_SOURCE_BYTES
from launcher.spec.verl import verl_overrides

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "configs" / "grpo-exp3-cpu.yaml"
REWARD = '''import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """0.6875 for an even-length response, else 0.3125: a score no built-in rule gives."""
    return 0.6875 if len(solution_str) % 2 == 0 else 0.3125
'''


def write_config(tmp_path: Path, reward: str = REWARD, rel: str = "my_reward.py", **function) -> Path:
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / rel).write_text(reward)
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({"base": str(CPU), "reward": {"function": {"path": f"./{rel}", **function}}}))
    return config


def refusal(call) -> str:
    with pytest.raises(BadInput) as exc:
        call()
    return str(exc.value)


def test_the_file_is_read_relative_to_the_config_not_the_working_directory(tmp_path, monkeypatch):
    config = write_config(tmp_path / "configs", rel="rewards/my_reward.py")
    monkeypatch.chdir(tmp_path)  # ./rewards/my_reward.py does not exist here
    fn = load_spec(config).reward.function
    assert (fn.path, fn.name, fn.source, fn.local) == ("./rewards/my_reward.py", "compute_score", REWARD, True)


def test_a_base_file_names_its_reward_relative_to_itself(tmp_path, monkeypatch):
    base = write_config(tmp_path / "team")
    child = tmp_path / "mine" / "exp.yaml"
    child.parent.mkdir()
    child.write_text(yaml.safe_dump({"base": str(base), "rollout": {"n": 4}}))
    monkeypatch.chdir(tmp_path / "mine")
    assert load_spec(child).reward.function.source == REWARD


def test_a_reward_named_with_set_is_read_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "r.py").write_text(REWARD.replace("0.3125", "0.25"))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(CPU, ["reward.function.path=./r.py"])  # the CPU config names pkg://grpo_verl_cpu.reward
    assert spec.reward.function.local and "0.25" in spec.reward.function.source


def test_the_content_is_in_the_hash_and_the_path_alone_is_not(tmp_path):
    a = load_spec(write_config(tmp_path / "a"))
    same = load_spec(write_config(tmp_path / "b"))
    changed = load_spec(write_config(tmp_path / "c", REWARD.replace("0.6875", "0.75")))
    assert a.job_name == same.job_name  # same content in another directory: the same run
    assert changed.job_name != a.job_name  # a changed reward is a new run
    assert changed.job_name.rsplit("-", 1)[0] == a.job_name.rsplit("-", 1)[0]


def test_a_runs_spec_yaml_reloads_without_the_file(tmp_path):
    """The pod (and `launcher report` on runs/<job>/spec.yaml) loads the spec with its source and no file beside it."""
    spec = load_spec(write_config(tmp_path / "a"))
    saved = tmp_path / "run" / "spec.yaml"
    saved.parent.mkdir()
    saved.write_text(dump_spec(spec))
    (tmp_path / "a" / "my_reward.py").unlink()
    again = load_spec(saved)
    assert again == spec and again.job_name == spec.job_name


def test_render_ships_the_file_read_only_and_points_verl_at_it(tmp_path):
    spec = load_spec(write_config(tmp_path))
    objects = render(spec)
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    assert cm["data"][REWARD_FILE_KEY] == REWARD
    assert json.loads(cm["data"]["spec.yaml"])["reward"]["function"]["source"] == REWARD
    job = objects[-1]
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "spec")
    assert mount == {"name": "spec", "mountPath": SPEC_MOUNT, "readOnly": True}
    assert REWARD_FILE_PATH == f"{SPEC_MOUNT}/{REWARD_FILE_KEY}"
    items = verl_overrides(spec)
    assert f"reward.custom_reward_function.path={REWARD_FILE_PATH}" in items
    assert "reward.custom_reward_function.name=compute_score" in items


def test_a_module_in_the_image_ships_nothing():
    spec = load_spec(CPU)
    assert not spec.reward.function.local and spec.reward.function.source is None
    cm = next(o for o in render(spec) if o["kind"] == "ConfigMap")
    assert set(cm["data"]) == {"spec.yaml"}
    assert "reward.custom_reward_function.path='pkg://grpo_verl_cpu.reward'" in verl_overrides(spec)


@pytest.mark.parametrize("content,field,words", [
    ("def compute_score(:\n", "reward.function.source", "valid Python in ./my_reward.py, got line 1:"),
    ("def score(a, b, c, d):\n    return 1.0\n", "reward.function.name",
     "a function defined at the top level of ./my_reward.py, got 'compute_score', which it does not define "
     "(it defines: score)"),
    ("if True:\n    def compute_score(a, b, c, d):\n        return 1.0\n", "reward.function.name", "(it defines: no public"),
])
def test_source_that_is_not_python_defining_the_name_is_refused(tmp_path, content, field, words):
    message = refusal(lambda: load_spec(write_config(tmp_path, content)))
    assert f"{field}: expected " in message and words in message, message


@pytest.mark.parametrize("content", [
    "from my_lib import compute_score\n", "compute_score = lambda *a: 1.0\n", "async def compute_score(*a):\n  return 1\n",
    "import os\nclass compute_score:\n    pass\n", "x: int = 1\ncompute_score: object = print\n",
])
def test_every_top_level_way_of_defining_the_name_is_accepted(tmp_path, content):
    assert load_spec(write_config(tmp_path, content)).reward.function.source == content


def test_the_file_is_never_imported(tmp_path):
    marker = tmp_path / "imported"
    content = f"open({str(marker)!r}, 'w').close()\n\ndef compute_score(*a):\n    return 1.0\n"
    load_spec(write_config(tmp_path, content))
    assert not marker.exists()


def test_missing_oversized_and_binary_files_are_refused_naming_the_field(tmp_path):
    config = write_config(tmp_path)
    (tmp_path / "my_reward.py").unlink()
    assert refusal(lambda: load_spec(config)) == (
        f"reward.function.path: ./my_reward.py (looked for {(tmp_path / 'my_reward.py').resolve()}): expected a Python "
        "file, found nothing")
    (tmp_path / "my_reward.py").mkdir()
    assert "found a directory" in refusal(lambda: load_spec(config))
    (tmp_path / "my_reward.py").rmdir()
    (tmp_path / "my_reward.py").write_text("#" * (MAX_REWARD_SOURCE_BYTES + 1))
    message = refusal(lambda: load_spec(config))
    assert f"expected at most {MAX_REWARD_SOURCE_BYTES} bytes" in message
    assert f"got {MAX_REWARD_SOURCE_BYTES + 1} bytes" in message and "pkg://" in message
    (tmp_path / "my_reward.py").write_bytes(b"x = '\xff'\n")
    assert "expected UTF-8 Python source, got a non-UTF-8 byte at offset 5" in refusal(lambda: load_spec(config))


def test_the_model_alone_refuses_a_local_path_without_source_and_a_module_with_one():
    raw = load_raw(CPU)
    local = {**raw, "reward": {"function": {"path": "./r.py"}}}  # a mapping not read by the loader (e.g. a test's)
    message = refusal(lambda: spec_from_raw(local))
    assert "reward.function.source: expected the content of ./r.py" in message
    assert "--set-file reward.function.source=./r.py" in message
    module = {**raw, "reward": {"function": {"path": "pkg://grpo_verl_cpu.reward", "source": "x = 1\n"}}}
    assert "reward.function.source: expected nothing: a pkg:// module" in refusal(lambda: spec_from_raw(module))
    big = {**raw, "reward": {"function": {"path": "./r.py", "source": "é" * (MAX_REWARD_SOURCE_BYTES // 2 + 1)}}}
    assert f"got {MAX_REWARD_SOURCE_BYTES + 2} bytes" in refusal(lambda: spec_from_raw(big))
    for path in ("pkg://a/b.py", "./reward.txt", "./dir/", "pkg://"):
        bad = {**raw, "reward": {"function": {"path": path, "source": "x = 1\n"}}}
        assert "reward.function.path: expected" in refusal(lambda: spec_from_raw(bad)), path


def test_validate_says_what_it_read_and_submit_refuses_before_any_request(api, tmp_path, capsys):
    config = write_config(tmp_path)
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert (f"reward.function: compute_score from ./my_reward.py ({describe_source(REWARD)}; read as Python, not "
            "imported; shipped in the run's ConfigMap)") in out
    for content in ("def compute_score(:\n", "#" * (MAX_REWARD_SOURCE_BYTES + 1)):
        (tmp_path / "my_reward.py").write_text(content)
        assert main(["submit", str(config)]) == 2
        assert "reward.function." in capsys.readouterr().err
    assert api.requests == []
