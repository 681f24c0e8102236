"""Loading configs: base includes, --set, and hostile YAML refused within bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import MAX_CONFIG_BYTES, MAX_DEPTH, apply_sets, load_raw, load_spec
from launcher.errors import BadInput

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_exp4_derives_from_exp3_without_repeating_it():
    text = (CONFIGS / "grpo-exp4.yaml").read_text()
    assert "base: grpo-exp3.yaml" in text
    assert "train_batch_size" not in text  # inherited, not repeated
    spec = load_spec(CONFIGS / "grpo-exp4.yaml")
    assert (spec.data.max_response_length, spec.rollout.n) == (512, 4)
    assert spec.data.train_batch_size == 8 and spec.actor.lr == 1e-6


def test_exp3_is_the_reference_experiment():
    s = load_spec(CONFIGS / "grpo-exp3.yaml")
    assert s.model.path == "Qwen/Qwen2.5-3B-Instruct" and s.data.dataset == "gsm8k"
    assert (s.resources.nodes, s.resources.gpus_per_node, s.resources.gpu_type) == (1, 2, "A100-80GB")
    assert (s.actor.strategy, s.rollout.name, s.rollout.tensor_parallel_size) == ("fsdp", "vllm", 1)
    assert (s.data.train_batch_size, s.rollout.n, s.actor.lr) == (8, 2, 1e-6)
    assert (s.actor.ppo_mini_batch_size, s.actor.ppo_micro_batch_size_per_gpu) == (8, 2)
    assert (s.data.max_prompt_length, s.data.max_response_length) == (512, 256)
    assert not s.algorithm.use_kl_in_reward and not s.algorithm.use_kl_loss
    assert s.trainer.total_training_steps == 25 and s.trainer.test_freq == -1 and not s.trainer.val_before_train


def test_set_parses_yaml_values_and_creates_nested_keys():
    raw = apply_sets({"rollout": {"n": 2}}, ["rollout.n=4", "scheduling.node_selector.pool=gpu", "trainer.logger=[console]"])
    assert raw["rollout"]["n"] == 4
    assert raw["scheduling"]["node_selector"] == {"pool": "gpu"}
    assert raw["trainer"]["logger"] == ["console"]


@pytest.mark.parametrize("item", ["rollout.n", "=4", "a..b=1"])
def test_set_malformed(item):
    with pytest.raises(BadInput, match="--set"):
        apply_sets({}, [item])


def test_set_list_indices_as_helm():
    raw = {"scheduling": {"tolerations": [{"key": "a", "operator": "Exists"}]}}
    out = apply_sets(raw, ["scheduling.tolerations[0].effect=NoSchedule", "scheduling.tolerations[1].key=b",
                           "trainer.logger[0]=console", "trainer.logger[1]=file", "grid[0][0]=1"])
    assert out["scheduling"]["tolerations"] == [{"key": "a", "operator": "Exists", "effect": "NoSchedule"},
                                                {"key": "b"}]
    assert out["trainer"]["logger"] == ["console", "file"] and out["grid"] == [[1]]
    assert raw["scheduling"]["tolerations"] == [{"key": "a", "operator": "Exists"}]  # the input is not changed


def test_set_list_index_reaches_the_spec():
    s = load_spec(CONFIGS / "grpo-exp3.yaml", ["scheduling.tolerations[0].key=gpu", "scheduling.tolerations[0].operator=Exists",
                         "secrets.image_pull_secrets[0]=regcred"])
    assert [(t.key, t.operator) for t in s.scheduling.tolerations] == [("gpu", "Exists")]
    assert s.secrets.image_pull_secrets == ["regcred"]


@pytest.mark.parametrize("item, message", [
    ("scheduling.tolerations[2].key=x",
     "--set 'scheduling.tolerations[2].key=x': index 2 is out of range: scheduling.tolerations has 1 item(s) "
     "(use [0] to [1]; [1] appends)"),
    ("scheduling.tolerations[x].key=v",
     "--set 'scheduling.tolerations[x].key=v': expected a list index [N] with N a whole number ≥ 0 after "
     "tolerations, got [x]"),
    ("scheduling.tolerations[-1]=v", "expected a list index [N] with N a whole number ≥ 0 after tolerations, got [-1]"),
    ("scheduling.tolerations[]=v", "got []"),
    ("scheduling.tolerations[0]key=v", "got 'scheduling.tolerations[0]key' (bad part 'tolerations[0]key')"),
    ("scheduling.tolerations[0=v", "(bad part 'tolerations[0')"),
    ("scheduling[0]=v", "--set 'scheduling[0]=v': scheduling is not a list (it holds {"),
    ("scheduling.tolerations.key=v", "scheduling.tolerations is not a section (it holds [{"),
])
def test_set_bad_list_index(item, message):
    raw = {"scheduling": {"tolerations": [{"key": "a"}]}}
    with pytest.raises(BadInput) as info:
        apply_sets(raw, [item])
    assert message in str(info.value)


def test_base_cycle_and_missing(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(BadInput, match="cycle"):
        load_raw(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: nope.yaml\n")
    with pytest.raises(BadInput, match="nope.yaml: no such file"):
        load_raw(tmp_path / "c.yaml")


def _refused(fn) -> str:
    """The BadInput message `fn` raises. Hostile input is bounded by structure (the loader's limits, named in the
    message), not by a wall-clock assertion."""
    with pytest.raises(BadInput) as info:
        fn()
    return str(info.value)


def test_yaml_bomb_refused(tmp_path):
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")
    )
    (tmp_path / "bomb.yaml").write_text(bomb)
    assert "YAML aliases (*ref) are not allowed" in _refused(lambda: load_raw(tmp_path / "bomb.yaml"))


def _nested(path: Path, lists: int) -> Path:
    path.write_text("a: " + "[" * lists + "]" * lists + "\n")
    return path


def test_deep_nesting_refused(tmp_path):
    # the composer's own depth limit refuses it (not a RecursionError caught on the way out)
    message = _refused(lambda: load_raw(_nested(tmp_path / "deep.yaml", 5000)))
    assert f"nesting deeper than {MAX_DEPTH}" in message, message


def test_nesting_limit_is_exactly_max_depth(tmp_path):
    """The mapping is depth 1, so `lists` nested lists put the innermost at depth lists + 1: MAX_DEPTH - 1 of them
    load, one more is refused."""
    value: list = []
    for _ in range(MAX_DEPTH - 2):
        value = [value]
    assert load_raw(_nested(tmp_path / "ok.yaml", MAX_DEPTH - 1)) == {"a": value}
    message = _refused(lambda: load_raw(_nested(tmp_path / "deep.yaml", MAX_DEPTH)))
    assert f"nesting deeper than {MAX_DEPTH}" in message, message


def test_huge_file_refused_without_reading(tmp_path, monkeypatch):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(MAX_CONFIG_BYTES * 512)  # sparse 512 MiB

    def no_read(self):
        raise AssertionError(f"{self} was read")

    monkeypatch.setattr(Path, "read_bytes", no_read)  # refused from its size alone
    monkeypatch.setattr(Path, "read_text", no_read)
    message = _refused(lambda: load_raw(path))
    assert f"{MAX_CONFIG_BYTES * 512} bytes; a config must be at most {MAX_CONFIG_BYTES} bytes" in message, message


@pytest.mark.parametrize("content,needle", [(b"\x00\x01\x02binary", "binary"), (b"name: \xff\xfe", "not UTF-8"),
                                            (b"- a\n- b\n", "expected a mapping"), (b"a: [", "not valid YAML")])
def test_broken_files(tmp_path, content, needle):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    assert needle in _refused(lambda: load_raw(path))


def test_directory_and_missing(tmp_path):
    assert "not a regular file" in _refused(lambda: load_raw(tmp_path))
    assert "no such file" in _refused(lambda: load_raw(tmp_path / "missing.yaml"))
