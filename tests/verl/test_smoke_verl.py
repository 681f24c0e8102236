"""configs/smoke-cpu.yaml's verl overrides, composed and validated by verl 0.9.1 as the smoke pod does it.

`smoke_checks.check_verl_config` is the pod's own check: the launcher's override list, verl's Hydra
config directory, `validate_config` (with trainer.n_gpus_per_node=1 for a CPU-only pod).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.entrypoint.smoke_checks import check_verl_config, validation_overrides
from launcher.spec.verl import verl_overrides
from verl_harness import compose, validate

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "smoke-cpu.yaml"


@pytest.mark.parametrize("sets", [[], ["resources.nodes=2"], ["backend=rayjob", "resources.nodes=2"]],
                         ids=lambda s: " ".join(s) or "default")
def test_smoke_cpu_overrides_compose_and_validate(sets):
    spec = load_spec(SMOKE, sets)
    overrides = verl_overrides(spec, ray_num_cpus=1)
    check = check_verl_config(spec, overrides)
    assert check.ok, check.detail
    assert "0 GPUs: validated with trainer.n_gpus_per_node=1" in check.detail
    # the same verdict through the harness the agreement tests use
    cfg = compose(validation_overrides(spec, overrides)[0])
    assert cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.nnodes == spec.resources.nodes
    validate(cfg)


def test_a_batch_verl_refuses_fails_the_check():
    spec = load_spec(SMOKE)
    overrides = [o for o in verl_overrides(spec) if not o.startswith("data.train_batch_size=")]
    check = check_verl_config(spec, [*overrides, "data.train_batch_size=7"])
    assert not check.ok and check.name == "verl_config"
    assert "ValueError: train_batch_size (7) must be >= actor.ppo_mini_batch_size (8)" in check.detail
