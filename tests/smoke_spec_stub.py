"""A stand-in for the smoke workload's spec fields while they are not merged (not collected: no test_ prefix).

The `smoke` branch adds `workload: Literal["grpo", "smoke"]` and a `smoke:` section to `ExperimentSpec`.
Until it lands, `install(monkeypatch)` makes `launcher.config` validate against a subclass carrying a
minimal version of both, so `launcher doctor --smoke` can be exercised. Delete this file once the
real fields exist (the doctor tests then run against them unchanged).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

import launcher.config
from launcher.spec import ExperimentSpec, _Model


class SmokeSection(_Model):
    steps: int = Field(3, ge=1)
    step_seconds: float = Field(1.0, ge=0)
    log_lines_per_step: int = Field(2, ge=0)
    memory_mb: int = Field(64, ge=0)
    min_shm: str = "64Mi"
    connect_timeout_s: float = Field(30, gt=0)


class StubSpec(ExperimentSpec):
    workload: Literal["grpo", "smoke"] = "grpo"
    smoke: SmokeSection = SmokeSection()


def install(monkeypatch) -> None:
    if "workload" in ExperimentSpec.model_fields:
        return  # the real fields are there
    monkeypatch.setattr(launcher.config, "ExperimentSpec", StubSpec)
