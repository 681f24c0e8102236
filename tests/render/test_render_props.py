"""Property tests: any value in any user-settable field is refused clearly or rendered faithfully.

For every leaf field of the spec, hypothesis throws strings (with YAML/Jinja metacharacters,
newlines, control and non-BMP characters), numbers (incl. NaN/inf), booleans and null at it. Either
validation refuses it with a message naming a field, what was expected and what was given, or the
rendered YAML parses and carries exactly the validated value — in the ConfigMap's spec.yaml and in
the job object where the field lands.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from launcher.spec.load import load_raw, spec_from_raw
from launcher.errors import BadInput
from launcher.render.manifests import render, to_yaml
from launcher.spec.model import ExperimentSpec, SecretRef, Toleration

EXP3_RAW = load_raw(Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml")


def _leaves(model: type[BaseModel] = ExperimentSpec, prefix: tuple = ()) -> list[tuple[str, ...]]:
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and ann not in (Toleration, SecretRef):
            out += _leaves(ann, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


LEAVES = _leaves()
NASTY = st.sampled_from(
    ["", " ", "a: b", "{{ x }}", "{% if %}", "- x", "'\"", "\n", "a\nb: c", "#", "&a", "*a", "!!python/object",
     "\x00", "\x85", "\u2028", "😀", "null", "true", "1e-6", "0x10", "---", "...", "%TAG", "\\", "a" * 300]
)
STRINGS = st.one_of(st.text(max_size=40), NASTY, st.from_regex(r"\A[a-z0-9][-a-z0-9]{0,20}[a-z0-9]\Z"))
SCALARS = st.one_of(
    STRINGS, st.integers(min_value=-(2**40), max_value=2**40), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(STRINGS, STRINGS, max_size=3),
)


def _get(obj, path):
    for part in path:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _set(raw: dict, path: tuple, value) -> dict:
    raw = copy.deepcopy(raw)
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return raw


def _check(path: tuple, value) -> str:
    """"refused" (with a message naming field, expected and got) or "rendered" (and carried faithfully).

    Either outcome passes here, so the property alone would pass if validation refused everything: the
    tests below it require "rendered" where a value is valid.
    """
    raw = _set(EXP3_RAW, path, value)
    try:
        spec = spec_from_raw(raw, "config")
    except BadInput as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.startswith("  - ")]
        assert lines, str(exc)
        for line in lines:
            assert ": expected " in line and ", got " in line, line
        return "refused"
    text = to_yaml(render(spec))
    objects = list(yaml.safe_load_all(text))
    assert objects == render(spec)  # the text is exactly the objects
    carried = yaml.safe_load(objects[-2]["data"]["spec.yaml"] if objects[-1]["kind"] != "ConfigMap" else "")
    assert carried == spec.canonical_data()
    # read back as the entrypoint reads it: a section left out at its default (reward) comes back as the default
    carried = ExperimentSpec.model_validate(carried).model_dump(mode="json")
    expected = spec.model_dump(mode="json")
    assert _get(carried, path) == _get(expected, path)
    if isinstance(value, str) and isinstance(_get(spec, path), str):
        assert _get(carried, path) == value  # strings are never altered
    _check_landing(path, spec, objects[-1])
    return "rendered"


def _check_landing(path, spec, job):
    """Fields that land in the job object must land there verbatim."""
    pod = (job["spec"]["pytorchReplicaSpecs"]["Master"]["template"] if job["kind"] == "PyTorchJob"
           else job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])
    container = pod["spec"]["containers"][0]
    if path == ("image",):
        assert container["image"] == spec.image
    elif path == ("scheduling", "pod_annotations"):
        assert pod["metadata"]["annotations"] == spec.scheduling.pod_annotations
    elif path == ("scheduling", "node_selector"):
        for k, v in spec.scheduling.node_selector.items():
            if k != spec.resources.gpu_product_label:
                assert pod["spec"]["nodeSelector"][k] == v
    elif path == ("scheduling", "namespace"):
        assert job["metadata"]["namespace"] == spec.scheduling.namespace
    elif path == ("name",):
        assert job["metadata"]["name"] == spec.job_name


@pytest.mark.parametrize("path", LEAVES, ids=".".join)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
def test_any_value_in_any_field(path, value):
    _check(path, value)


ANNOTATION_FORBIDDEN = frozenset(
    [chr(c) for c in range(0x20) if chr(c) not in "\t\n"] + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u2028", "\u2029", "\ufeff", "\ufffe", "\uffff"]
)


@settings(max_examples=200, deadline=None)
# the prefix is a DNS subdomain: dot-separated labels, each starting and ending alphanumeric (`a..0`, `a.-0` are not)
@given(key=st.from_regex(r"\A[a-z]([a-z0-9-]{0,8}[a-z0-9])?(\.[a-z]([a-z0-9-]{0,8}[a-z0-9])?)?/[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?\Z"),
       # plain text often hits neither edge: mix in the characters on both sides of the rule
       value=st.text(alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(list(
           "\t\n\r\x0b\x1f\x7f\x85\u2028\ufeff\uffff{}:#'\"-|>"))), max_size=200))
@example(key="a/b", value="line 1\n\tline 2")
@example(key="a/b", value="carriage\r\nreturn")
def test_annotation_values_round_trip_exactly(key, value):
    # Annotation values are free text, the one place multi-line strings must survive verbatim: everything
    # renders except what the spec documents as refused (C0/C1 controls other than tab and newline, DEL,
    # U+2028/U+2029, U+FEFF, U+FFFE/U+FFFF: unreadable or folded by YAML readers).
    refused = any(c in ANNOTATION_FORBIDDEN for c in value)
    assert _check(("scheduling", "pod_annotations"), {key: value}) == ("refused" if refused else "rendered")


@pytest.mark.parametrize("path", LEAVES, ids=".".join)
def test_every_field_renders_its_own_valid_value(path):
    # the value grpo-exp3 resolves to is valid by definition: each field's "rendered" branch is reached
    values = spec_from_raw(EXP3_RAW, "config").model_dump(mode="json")
    assert _check(path, _get(values, path)) == "rendered"


# Valid values other than grpo-exp3's, one per kind of field, written out by hand (not drawn from the model).
VALID = [
    (("name",), "my-exp"),
    (("image",), "registry.example.com/team/verl:1.2"),
    (("rollout", "n"), 4),
    (("actor", "lr"), 3e-6),
    (("model", "offline"), True),
    (("data", "val_max_samples"), 100),
    (("resources", "memory"), "64Gi"),
    (("storage", "claim_name"), "ckpt"),
    (("trainer", "logger"), ["console"]),
    (("scheduling", "node_selector"), {"pool": "gpu-a"}),
    (("scheduling", "pod_annotations"), {"example.com/note": "a: b\n{{ c }} # d"}),
    (("scheduling", "namespace"), "team-a"),
]
# ...and values every reader of the spec's docs knows to be invalid.
INVALID = [
    (("name",), "Bad_Name"),
    (("rollout", "n"), 0),
    (("actor", "lr"), -1.0),
    (("backend",), "slurm"),
    (("resources", "memory"), "lots"),
    (("scheduling", "namespace"), "Team_A"),
]


@pytest.mark.parametrize("path,value", VALID, ids=lambda v: ".".join(v) if isinstance(v, tuple) else None)
def test_valid_values_are_rendered(path, value):
    assert _check(path, value) == "rendered"


@pytest.mark.parametrize("path,value", INVALID, ids=lambda v: ".".join(v) if isinstance(v, tuple) else None)
def test_invalid_values_are_refused(path, value):
    assert _check(path, value) == "refused"
