"""`verl.overrides`: the user's own Hydra overrides, appended after the launcher's list.

What is refused and why (a typed field's key, a key the launcher owns, bad syntax), what is accepted (any other
verl key, in train and eval lists, in the hash), the `--verl` flag and `--set KEY+=VALUE`, and where the overrides
show (validate, provenance.json, the report's config table). verl's own composition of them is in
tests/verl/test_verl_compose.py; the chart's refusals are compared with these in tests/chart/test_chart.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.spec.load import dump_spec, load_spec
from launcher.spec.model import field_docs
from launcher.spec.verl import CPU_KEYS, OWNED_KEYS, TYPED_KEYS, override_key, verl_overrides

ROOT = Path(__file__).resolve().parents[2]
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"
CPU = ROOT / "configs" / "grpo-exp3-cpu.yaml"
TOKENS = "actor_rollout_ref.rollout.max_num_batched_tokens=2048"


def with_overrides(config: Path, items: list[str], sets=()):
    return load_spec(config, [*sets, f"verl.overrides={json.dumps(items)}"])


def refusals(config: Path, items: list[str]) -> list[str]:
    try:
        with_overrides(config, items)
    except BadInput as exc:
        return [line.strip()[2:] for line in str(exc).splitlines() if line.startswith("  - ")]
    return []


def test_overrides_come_last_in_train_and_eval_lists_and_change_the_hash():
    plain = load_spec(EXP3)
    spec = with_overrides(EXP3, [TOKENS, "~critic.optim", "++x.y='a: b'"])
    for mode in ("train", "eval"):
        ov = verl_overrides(spec, mode=mode)
        assert ov[-3:] == [TOKENS, "~critic.optim", "++x.y='a: b'"]
        assert [override_key(o) for o in ov[:-3]] == [override_key(o) for o in verl_overrides(plain, mode=mode)]
    assert spec.config_hash() != plain.config_hash()
    # none at all: the section is left out of the canonical form, so every existing job name stays the same
    assert with_overrides(EXP3, []).config_hash() == plain.config_hash()
    assert "\nverl:" not in dump_spec(plain) and TOKENS in dump_spec(spec)


@pytest.mark.parametrize("item, why", [
    ("data.train_batch_size=16", "data.train_batch_size is the typed field data.train_batch_size"),
    ("trainer.nnodes=2", "trainer.nnodes is the typed field resources.nodes"),
    ("actor_rollout_ref.actor.optim={lr:1}", "actor_rollout_ref.actor.optim.lr is the typed field actor.lr"),
    ("+trainer.default_local_dir=/x", "trainer.default_local_dir is the typed field trainer.checkpoint_dir"),
    ("~reward.custom_reward_function", "reward.custom_reward_function is the typed field reward.function"),
    ("trainer.experiment_name=x", "the launcher sets trainer.experiment_name itself"),
    ("++ray_kwargs.ray_init.num_cpus=3", "the launcher sets ray_kwargs.ray_init.num_cpus itself"),
])
def test_a_key_the_launcher_sets_is_refused_naming_what_to_use(item, why):
    [problem] = refusals(EXP3, [TOKENS, item])
    assert problem.startswith("verl.overrides.1: expected a verl key the launcher does not set itself")
    assert why in problem and repr(item) in problem


def test_cpu_keys_are_owned_on_cpu_training_only():
    item = "actor_rollout_ref.rollout.enforce_eager=False"
    assert refusals(EXP3, [item]) == []
    [problem] = refusals(CPU, [item])
    assert "the launcher sets actor_rollout_ref.rollout.enforce_eager itself" in problem


@pytest.mark.parametrize("item", ["a b=1", "=1", "x", "+~x=1", "x.=1", "x=1\u2028"])
def test_bad_syntax_is_refused_in_words(item):
    [problem] = refusals(EXP3, [item])
    assert problem.startswith("verl.overrides.0: expected a Hydra override KEY=VALUE, +KEY=VALUE, ++KEY=VALUE or ~KEY")


def test_every_key_the_launcher_sets_is_one_the_user_cannot():
    """The refusal tables (TYPED_KEYS, OWNED_KEYS, CPU_KEYS; the chart has the same) cover every key of the
    launcher's own list, across GPU and CPU, 1 and 2 nodes, train and eval, resume and Ray's CPU count: a key
    added to verl_overrides without a row here fails this test."""
    cases = [(EXP3, []), (EXP3, ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/w/global_step_1",
                                 "data.val_max_samples=4", "trainer.max_actor_ckpt_to_keep=1",
                                 "reward.function.path=pkg://r"]),
             (CPU, []), (CPU, ["resources.nodes=2"]), (CPU, ["backend=rayjob"])]
    for config, sets in cases:
        spec = load_spec(config, sets)
        owned = (*TYPED_KEYS, *OWNED_KEYS, *(CPU_KEYS if spec.cpu_training else ()))
        for mode in ("train", "eval"):
            for item in verl_overrides(spec, mode=mode, ray_num_cpus=2):
                key = override_key(item)
                assert any(key == k or key.startswith(k + ".") for k in owned), (config.name, sets, item)
                if not sets:  # and the rule refuses it as an override of the same config
                    assert refusals(config, [item]), item


def test_each_typed_key_names_a_real_field_that_sets_it():
    docs = field_docs()
    for key, field in TYPED_KEYS.items():
        assert field.split(" ")[0] in docs, (key, field)
    # and the field really is where the value comes from: change it, the key's value changes
    spec = load_spec(EXP3, ["data.train_batch_size=16", "actor.lr=3e-6", "resources.nodes=2"])
    ov = verl_overrides(spec)
    assert {"data.train_batch_size=16", "actor_rollout_ref.actor.optim.lr=3e-06", "trainer.nnodes=2"} <= set(ov)


def test_verl_flag_is_taken_as_written_in_command_line_order(capsys):
    assert main(["validate", str(EXP3), "--verl", TOKENS, "--set", "verl.overrides+=+trainer.a=1",
                 "--verl", "++trainer.b='x: y'", "--show-overrides"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [TOKENS, "+trainer.a=1", "++trainer.b='x: y'"]
    assert any(line.startswith("verl.overrides: 3 appended; ") for line in out)


def test_append_to_something_that_is_not_a_list_is_refused(capsys):
    assert main(["validate", str(EXP3), "--set", "rollout.n+=3"]) == 2
    assert "rollout.n is not a list (it holds 2); += appends to a list" in capsys.readouterr().err


def test_a_refused_override_exits_2_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LAUNCHER_RUNS_DIR", str(tmp_path / "runs"))
    assert main(["submit", str(EXP3), "--verl", "data.train_batch_size=16"]) == 2
    err = capsys.readouterr().err
    assert "verl.overrides.0" in err and "data.train_batch_size" in err and not (tmp_path / "runs").exists()


def test_overrides_show_in_provenance_and_the_report_config_table(tmp_path):
    import simlog
    from launcher.run import provenance
    from launcher.run.dirs import RunDir

    spec = with_overrides(EXP3, [TOKENS])
    rd = RunDir(tmp_path / spec.job_name)
    log = tmp_path / "verl.log"
    log.write_text("".join(simlog.generate(steps=3, seed=1)))
    assert main(["metrics", str(log), "-d", str(rd.path)]) == 0
    rd.spec.write_text(dump_spec(spec))
    provenance.write_submitted(rd, spec)
    assert json.loads(rd.provenance.read_text())["verl_overrides"] == [TOKENS]
    assert main(["report", str(rd.path)]) == 0
    table = (rd.path / "report.md").read_text().split("## Config", 1)[1].split("<details>", 1)[0]
    assert f"| `verl.overrides` | `{[TOKENS]}` |" in table
