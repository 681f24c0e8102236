"""The evaluation job's verl command lines under verl 0.9.1's real Hydra config and `validate_config`.

`launcher.entrypoint.eval.target_run` builds, per model, `verl_overrides(mode="eval")` plus a
per-model experiment name, `default_local_dir` and `trainer.validation_data_dir`. Here each list
composes like `python -m verl.trainer.main_ppo` composes it, every override lands on its key, verl's
own validation passes, and the composed validation sampling is greedy (verl's `val_kwargs`
defaults: we rely on them rather than override them, so this test is what notices if verl changes).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.entrypoint import eval as EV

from test_verl_compose import CONFIGS, assert_every_override_applied
from verl_harness import compose, validate

VERL_DIR = Path(importlib.util.find_spec("verl").origin).parent  # without importing verl


def _overrides(argv: list[str]) -> list[str]:
    assert argv[:3] == EV.VERL_COMMAND
    return argv[3:]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_eval_command_per_model_composes_validates_and_is_greedy(name, backend):
    spec = load_spec(CONFIGS[name], backend=backend)
    targets = [EV.Target("base", spec.model.path), EV.Target("checkpoint", str(EV.merged_dir(spec, 25)), 25)]
    names = set()
    for t in targets:
        run = EV.target_run(spec, t, attempt="a1", ray_num_cpus=16 if backend == "pytorchjob" else None, env={})
        overrides = _overrides(run.argv)
        cfg = compose(overrides)
        assert_every_override_applied(cfg, overrides)
        validate(cfg)
        tr = cfg.trainer
        assert tr.val_only is True and tr.val_before_train is True  # verl.md §3: both are needed
        assert tr.save_freq == -1 and tr.resume_mode == "disable"  # an eval never saves or resumes
        assert tr.validation_data_dir == str(run.data_dir)  # the key exists in 0.9.1 and takes our path
        assert tr.default_local_dir == str(run.root / "ckpt")  # never the training run's directory
        assert cfg.actor_rollout_ref.model.path == t.model
        vk = cfg.actor_rollout_ref.rollout.val_kwargs
        assert vk.do_sample is False and vk.temperature == 0 and vk.n == 1  # greedy, one answer per question
        assert cfg.data.val_files == spec.data.val_path
        assert cfg.data.validation_shuffle is False  # same question order for both models
        names.add(tr.experiment_name)
    assert names == {f"{name}-eval-base", f"{name}-eval-checkpoint-step25"}  # distinguishable runs


def test_verl_dumps_validation_generations_where_the_entrypoint_reads_them():
    """`_write_generations` writes `<validation_data_dir>/<global_steps>.jsonl` with input/output/gts/score
    (read from verl's source: the trainer cannot run here), which `read_dump`/`questions_payload` consume."""
    tree = ast.parse((VERL_DIR / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_write_generations")
    src = ast.unparse(fn)
    assert "os.path.join(dump_path, f'{global_steps}.jsonl')" in src
    for key in ("'input'", "'output'", "'gts'", "'score'"):
        assert key in src, key
    base = ast.unparse(next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_validate"))
    assert "self.config.trainer.get('validation_data_dir', None)" in base
    # val_only returns only after draining the dump executor, so the file exists when verl exits.
    fit = (VERL_DIR / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    assert "if self.config.trainer.get(\"val_only\", False):\n                self._shutdown_dump_executor()" in fit


def test_verl_flexible_scorer_is_the_one_the_entrypoint_loads():
    score = EV._gsm8k_scorer()
    assert score is not None
    assert score("so the total is 72.\n#### 72", "72") == 1.0
    assert score("#### $72", "72", method="flexible") == 1.0 and score("#### $72", "72") == 0  # verl.md §11
    assert Path(score.__code__.co_filename).resolve() == (VERL_DIR / "utils" / "reward_score" / "gsm8k.py").resolve()
