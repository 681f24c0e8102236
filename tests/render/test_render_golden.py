"""Golden files of the rendered manifests: exp3 and exp4 on every backend.

Update after an intended change with `make golden` (UPDATE_GOLDEN=1 pytest tests/render/test_render_golden.py)
and review the diff like any code change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from crd_schema import schema_errors
from launcher.spec.load import load_spec
from launcher.render.manifests import render, to_yaml

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = [(exp, backend) for exp in ("grpo-exp3", "grpo-exp4") for backend in ("pytorchjob", "rayjob", "trainjob")]


def _rendered(exp: str, backend: str) -> str:
    return to_yaml(render(load_spec(ROOT / "configs" / f"{exp}.yaml", backend=backend)))


@pytest.mark.parametrize("exp,backend", CASES)
def test_golden(exp, backend):
    path = GOLDEN / f"{exp}-{backend}.yaml"
    text = _rendered(exp, backend)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run `make golden`"
    assert text == path.read_text(), f"{path} is stale: run `make golden` and review the diff"


@pytest.mark.parametrize("exp,backend", CASES)
def test_deterministic_and_parsed(exp, backend):
    # Byte-identical across calls, and what we print parses back to the very objects render returned.
    first, second = _rendered(exp, backend), _rendered(exp, backend)
    assert first == second
    spec = load_spec(ROOT / "configs" / f"{exp}.yaml", backend=backend)
    assert list(yaml.safe_load_all(first)) == render(spec)


@pytest.mark.parametrize("exp,backend", CASES)
def test_golden_validates_against_real_crds(exp, backend):
    for obj in yaml.safe_load_all((GOLDEN / f"{exp}-{backend}.yaml").read_text()):
        assert schema_errors(obj) == [], obj["kind"]


def test_exp4_differs_from_exp3_only_where_configured():
    exp3 = load_spec(ROOT / "configs/grpo-exp3.yaml")
    exp4 = load_spec(ROOT / "configs/grpo-exp4.yaml")
    d3, d4 = exp3.model_dump(), exp4.model_dump()
    changed = {
        f"{section}.{key}"
        for section, fields in d4.items()
        if isinstance(fields, dict)
        for key, value in fields.items()
        if d3[section][key] != value
    } | {k for k in d4 if not isinstance(d4[k], dict) and d4[k] != d3[k]}
    assert changed == {"name", "data.max_response_length", "rollout.n"}
    assert exp3.job_name != exp4.job_name
