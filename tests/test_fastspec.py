"""The render/validate fast path (`launcher.fastspec`) never disagrees with the pydantic model.

- the generated plan (`launcher/_spec_plan.py`) is what `launcher.spec_plan` derives from the model now;
- whenever fastspec accepts an input, pydantic accepts it too and dumps exactly the same data (key order
  included), and `check_rules` gives the same verdicts on the view as on the model (random mutations of a
  real config, hostile strings against every pattern);
- what fastspec cannot judge goes to pydantic, so the errors are pydantic's, word for word;
- the plan generator refuses what it cannot transcribe (validators, strict mode, aliases...).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Annotated

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import SchemaValidator

from launcher import _spec_plan, fastspec, spec_plan
from launcher.config import load_raw, load_spec, load_spec_view
from launcher.errors import BadInput
from launcher.spec import ExperimentSpec, check_rules

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
EXP3_RAW = load_raw(ROOT / "configs" / "grpo-exp3.yaml")


def _dump(data) -> str:
    return json.dumps(data, ensure_ascii=False)  # not sorted: the key order is part of the contract


def _agrees(raw) -> bool:
    """fastspec's answer is pydantic's (when it gives one); True when it gave one."""
    fast = fastspec.validate(copy.deepcopy(raw))
    if fast is None:
        return False
    model = ExperimentSpec.model_validate(copy.deepcopy(raw))  # must not raise
    assert _dump(fast) == _dump(model.model_dump(mode="json"))
    view = fastspec.view(fast)
    assert check_rules(view) == check_rules(model)
    assert view.config_hash() == model.config_hash() and view.job_name == model.job_name
    return True


def test_plan_is_not_stale():
    assert spec_plan.PLAN_PATH.read_text() == spec_plan.plan_text(), (
        f"src/launcher/_spec_plan.py is stale: run `{spec_plan.REGEN}` (or `make chart`) and commit it")


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob", "trainjob"])
def test_the_repository_configs_take_the_fast_path(config, backend):
    raw = {**load_raw(config), "backend": backend}
    assert _agrees(raw)


def test_defaults_and_every_section_agree():
    assert _agrees({"name": "x"})
    full = ExperimentSpec.model_validate({"name": "x"}).model_dump(mode="json")
    assert _agrees(full)  # a config that spells out every key
    busy = copy.deepcopy(EXP3_RAW)
    busy["scheduling"] = {
        "queue": "team-a", "node_selector": {"pool": "gpu", "example.com/zone": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "toleration_seconds": 5}],
        "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}}]}},
        "pod_annotations": {"note": "two\nlines\tand tab"},
    }
    busy["env"] = [{"name": "FOO", "value": "bar"}, {"name": "TOKEN", "secret_key_ref": {"name": "s", "key": "k"}}]
    busy["tracking"] = {"mlflow": {"enabled": True, "tracking_uri": "http://mlflow:5000/x"}}
    busy["secrets"] = {"hf_token": {"name": "hf", "key": "token"}, "image_pull_secrets": ["regcred"]}
    busy["actor"] = {**busy["actor"], "lr": 1}  # an int where a float is due: converted as pydantic does
    assert _agrees(busy)


@pytest.mark.parametrize("mutate", [
    lambda r: r["data"].update(train_batch_size="8"),        # a str for an int: pydantic coerces, fastspec asks it
    lambda r: r["actor"].update(lr="1e-6"),                   # YAML 1.1 reads 1e-6 as a str
    lambda r: r["data"].update(train_batch_size=8.0),
    lambda r: r["rollout"].update(n=True),
    lambda r: r.update(nmae="typo"),
    lambda r: r["resources"].update(cpu="16 cores"),
    lambda r: r["model"].update(path="bad\nline"),
    lambda r: r.update(scheduling={"pod_annotations": {"a": "x\x1c"}}),
    lambda r: r.update(tracking={"mlflow": {"tracking_uri": "http://h/\x1c"}}),
    lambda r: r.pop("name"),
    lambda r: r["trainer"].update(logger=("console",)),
], ids=range(11))
def test_what_fastspec_cannot_judge_goes_to_pydantic(mutate):
    raw = copy.deepcopy(EXP3_RAW)
    mutate(raw)
    assert fastspec.validate(copy.deepcopy(raw)) is None


def _error(loader, path: Path, sets=()) -> str:
    with pytest.raises(BadInput) as info:
        loader(path, sets)
    return str(info.value)


@pytest.mark.parametrize("sets", [
    ["resources.gpus_per_node=3"],        # check_rules (batch not divisible), on the fast path's view
    ["data.train_batch_size=abc"],        # pydantic's type error
    ["rollout.nn=2"],                     # extra key
    ["resources.gpu_type=H100"] + ["resources.gpu_label_scheme=aks"],
    ["tracking.wandb.api_key=sk-secret"],  # redacted in both
    ["name=" + "x" * 40],
])
def test_errors_are_the_same_on_both_paths(sets):
    config = ROOT / "configs" / "grpo-exp3.yaml"
    assert _error(load_spec_view, config, sets) == _error(load_spec, config, sets)


def test_the_view_is_read_only_and_dumps_a_copy():
    view = load_spec_view(ROOT / "configs" / "grpo-exp3.yaml")
    assert type(view).__name__ == "ExperimentSpecView"
    with pytest.raises(AttributeError):
        view.name = "other"
    dumped = view.model_dump(mode="json")
    dumped["rollout"]["n"] = 99
    assert view.model_dump(mode="json")["rollout"]["n"] == 2 and view.rollout.n == 2


# --------------------------------------------------------------------------------------------------
# Random mutations of a real config


def _field_paths() -> list[tuple[tuple[str, ...], tuple]]:
    out = []

    def walk(model: str, prefix: tuple[str, ...]):
        for field, node, _required, _default in _spec_plan.MODELS[model]:
            out.append(((*prefix, field), node))
            if node[0] == "model":
                walk(node[1], (*prefix, field))

    walk(_spec_plan.ROOT, ())
    return out


PATHS = _field_paths()
ODD_CHARS = "aZ09-._/:@ \n\t\x1c\x1f\x7f\x85\xa0é\u2028\ufeff\ud800\U0001f600$^"
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), st.integers(-2**63, 2**63),
    st.floats(allow_nan=True, allow_infinity=True), st.text(ODD_CHARS, max_size=8),
    st.sampled_from(["16", "500m", "128Gi", "1.5", "gsm8k", "grpo", "fsdp", "vllm", "/workspace/x", "A100-80GB",
                     "default", "Exists", "NoSchedule", "ReadWriteMany", "console", "http://h:1/p", "a/b", "x" * 70,
                     "nodeAffinity", "auto", "resume_path", "WARN", "IPC_LOCK"]),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(ODD_CHARS, max_size=5), SCALARS,
                                                                            max_size=2),
                   st.lists(st.dictionaries(st.sampled_from(["key", "operator", "value", "effect", "name",
                                                              "toleration_seconds", "secret_key_ref", "bogus"]),
                                            SCALARS, max_size=3), max_size=2))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), VALUES, st.booleans()), min_size=1, max_size=3))
def test_fastspec_never_accepts_what_pydantic_refuses_or_reads_differently(mutations):
    raw = copy.deepcopy(EXP3_RAW)
    for (path, _node), value, drop in mutations:
        node = raw
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            if drop:
                node.pop(path[-1], None)
            else:
                node[path[-1]] = value
    fast = fastspec.validate(copy.deepcopy(raw))
    if fast is None:
        return
    try:
        model = ExperimentSpec.model_validate(copy.deepcopy(raw))
    except ValidationError as exc:  # pragma: no cover - the failure this test exists for
        raise AssertionError(f"fastspec accepted what pydantic refuses: {exc}") from None
    assert _dump(fast) == _dump(model.model_dump(mode="json"))
    assert check_rules(fastspec.view(fast)) == check_rules(model)


def _patterns() -> list[tuple]:
    found = set()

    def walk(node):
        if isinstance(node, tuple):
            if node and node[0] == "str" and node[3]:
                found.add(node)
            for item in node:
                walk(item)

    walk(tuple(_spec_plan.MODELS.values()))
    return sorted(found, key=repr)


@pytest.mark.parametrize("node", _patterns(), ids=lambda n: n[3][:40])
@settings(max_examples=300, deadline=None)
@given(text=st.text(ODD_CHARS + "ABCxyz019-_.,=/:@", max_size=12))
def test_every_pattern_accepts_only_what_pydantic_accepts(node, text):
    _, low, high, pattern = node
    rust = SchemaValidator({"type": "str", "pattern": pattern, "max_length": high, **({"min_length": low} if low else {})})
    try:
        ours = fastspec._str(node, text) == text
    except fastspec._Unsure:
        ours = False
    try:
        rust.validate_python(text)
        theirs = True
    except ValueError:  # pydantic_core.ValidationError
        theirs = False
    assert not ours or theirs, f"{pattern!r} accepts {text!r} in Python only"
    if text.isascii() and text.isprintable():
        assert ours == theirs, f"{pattern!r}: {text!r} is plain ASCII, both engines must agree"


def test_every_pattern_of_the_spec_is_translated():
    """An untranslatable pattern would silently send every config through pydantic: keep them all fast."""
    assert all(fastspec._translate(node[3]) is not fastspec._NEVER for node in _patterns())


# --------------------------------------------------------------------------------------------------
# The generator refuses what it cannot transcribe


def _plan_of(model: type[BaseModel]):
    schema = model.__pydantic_core_schema__
    builder = spec_plan._Builder({d["ref"]: d for d in schema.get("definitions", [])})
    return builder.model(schema.get("schema", schema) if schema["type"] == "definitions" else schema, model.__name__)


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid")


def test_the_plan_generator_refuses_what_it_cannot_express():
    class WithValidator(_Forbid):
        x: int = 1

        @field_validator("x")
        @classmethod
        def _positive(cls, v):
            return v

    class Strict(_Forbid):
        model_config = ConfigDict(extra="forbid", strict=True)
        x: int = 1

    class Aliased(_Forbid):
        x: int = Field(1, alias="y")

    class Multiple(_Forbid):
        x: Annotated[int, Field(multiple_of=2)] = 2

    class Factory(_Forbid):
        x: list[int] = Field(default_factory=list)

    class Open(BaseModel):
        x: int = 1

    for model in (WithValidator, Strict, Aliased, Multiple, Factory, Open):
        with pytest.raises(spec_plan.Unsupported):
            _plan_of(model)

    class Fine(_Forbid):
        x: int = Field(1, ge=0)

    assert _plan_of(Fine) == "Fine"
