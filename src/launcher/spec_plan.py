"""Generate `launcher/_spec_plan.py`, the validation plan `launcher.fastspec` follows, from the pydantic model.

The plan is a plain-data transcription of the core schema pydantic itself validates with
(`ExperimentSpec.__pydantic_core_schema__`): per section, each field's type, constraints and default
(as its JSON dump). Only what the transcription understands is allowed: any core-schema type, key or
config it does not know (a validator, a serializer, an alias, `strict`, `default_factory`, a new
constraint...) makes generation fail, so the plan can never silently be looser than the model.
tests/test_fastspec.py regenerates it and fails when the committed file differs (the chart's
`hack/gen_chart.py check` does the same), and checks fastspec against pydantic on many inputs.

    python -m launcher.spec_plan [--check]     (also run by hack/gen_chart.py chart / check)

Node shapes (tuples, so the generated module is a literal):
    ("str", min_length, max_length, pattern)   ("int", ge, gt, le, lt)   ("float", ge, gt, le, lt)
    ("bool",)   ("none",)   ("literal", (values...))   ("nullable", node)   ("json",) (pydantic's JsonValue)
    ("list", item, min_length, max_length)   ("dict", key, value, min_length, max_length)   ("model", name)
    MODELS[name] = ((field, node, required, default_json), ...) in declaration order (model_dump's order).
"""

from __future__ import annotations

import pprint
import sys
from pathlib import Path
from typing import Any

from launcher.generated import generator_main

PLAN_PATH = Path(__file__).with_name("_spec_plan.py")
REGEN = "python -m launcher.spec_plan"

# core-schema keys that carry no validation: JSON-schema hints and pydantic's bookkeeping
_METADATA_KEYS = {"pydantic_js_functions", "pydantic_js_updates", "pydantic_js_annotation_functions",
                  "pydantic_js_prefer_positional_arguments", "pydantic_js_input_core_schema"}
_BOUNDS = ("ge", "gt", "le", "lt")


class Unsupported(Exception):
    """The model uses something the plan cannot express: fastspec would be looser than pydantic."""


def _only(schema: dict, allowed: set[str], where: str) -> None:
    extra = set(schema) - allowed - {"type", "metadata", "ref"}
    if extra:
        raise Unsupported(f"{where}: core schema {schema['type']!r} with {sorted(extra)}")
    meta = schema.get("metadata") or {}
    if set(meta) - _METADATA_KEYS:
        raise Unsupported(f"{where}: core schema metadata {sorted(set(meta) - _METADATA_KEYS)}")


def _json_default(value: Any, where: str) -> Any:
    from pydantic import BaseModel
    from pydantic_core import to_jsonable_python

    out = value.model_dump(mode="json") if isinstance(value, BaseModel) else to_jsonable_python(value)
    if out != value and not isinstance(value, BaseModel):
        raise Unsupported(f"{where}: default {value!r} is not plain JSON")
    return out


class _Builder:
    def __init__(self, definitions: dict[str, dict]):
        self.definitions = definitions
        self.models: dict[str, tuple] = {}

    def node(self, s: dict, where: str) -> tuple:
        t = s["type"]
        if t == "definition-ref":
            _only(s, {"schema_ref"}, where)
            return self.node(self.definitions[s["schema_ref"]], where)
        if t == "str":
            _only(s, {"min_length", "max_length", "pattern"}, where)
            return ("str", s.get("min_length"), s.get("max_length"), s.get("pattern"))
        if t in ("int", "float"):
            _only(s, set(_BOUNDS), where)
            return (t, *(s.get(b) for b in _BOUNDS))
        if t in ("bool", "none"):
            _only(s, set(), where)
            return (t,)
        if t == "literal":
            _only(s, {"expected"}, where)
            if not all(type(v) is str for v in s["expected"]):
                raise Unsupported(f"{where}: a literal other than strings")
            return ("literal", tuple(s["expected"]))
        if t == "nullable":
            _only(s, {"schema"}, where)
            return ("nullable", self.node(s["schema"], where))
        if t == "list":
            _only(s, {"items_schema", "min_length", "max_length"}, where)
            return ("list", self.node(s["items_schema"], where + "[]"), s.get("min_length"), s.get("max_length"))
        if t == "dict":
            _only(s, {"keys_schema", "values_schema", "min_length", "max_length"}, where)
            return ("dict", self.node(s["keys_schema"], where + " (key)"), self.node(s["values_schema"], where + "{}"),
                    s.get("min_length"), s.get("max_length"))
        if t == "json-or-python" and str(s.get("ref", "")).startswith("pydantic.types.JsonValue:"):
            return ("json",)
        if t == "model":
            return ("model", self.model(s, where))
        raise Unsupported(f"{where}: core schema type {t!r}")

    def model(self, s: dict, where: str) -> str:
        _only(s, {"cls", "config", "custom_init", "root_model", "schema"}, where)
        cls = s["cls"]
        name = cls.__name__
        if name in self.models:
            return name
        config = dict(s.get("config") or {})
        if config.pop("extra_fields_behavior", None) != "forbid" or set(config) - {"title"}:
            raise Unsupported(f"{where}: model {name} config {s.get('config')} (only extra='forbid' is transcribed)")
        if s.get("custom_init") or s.get("root_model"):
            raise Unsupported(f"{where}: model {name} with a custom __init__ or a root model")
        decorators = cls.__pydantic_decorators__
        if any(getattr(decorators, kind) for kind in ("validators", "field_validators", "root_validators",
                                                      "field_serializers", "model_serializers", "model_validators",
                                                      "computed_fields")):
            raise Unsupported(f"{where}: model {name} has validators, serializers or computed fields")
        fields_schema = s["schema"]
        _only(fields_schema, {"fields", "model_name", "computed_fields"}, f"{where} ({name})")
        if fields_schema.get("computed_fields"):
            raise Unsupported(f"{where}: model {name} has computed fields")
        self.models[name] = ()  # a placeholder: a recursive model refers to itself by name
        fields = []
        for field, fs in fields_schema["fields"].items():
            at = f"{name}.{field}"
            if fs["type"] != "model-field":
                raise Unsupported(f"{at}: core schema {fs['type']!r}")
            _only(fs, {"schema"}, at)
            inner = fs["schema"]
            required, default = True, None
            if inner["type"] == "default":
                _only(inner, {"default", "schema"}, at)
                required, default = False, _json_default(inner["default"], at)
                inner = inner["schema"]
            fields.append((field, self.node(inner, at), required, default))
        self.models[name] = tuple(fields)
        return name


def build_plan() -> dict:
    """The plan of `spec.ExperimentSpec`, from its core schema."""
    from launcher.spec import ExperimentSpec

    root = ExperimentSpec.__pydantic_core_schema__
    definitions: dict[str, dict] = {}
    if root["type"] == "definitions":
        definitions = {d["ref"]: d for d in root["definitions"]}
        root = root["schema"]
    builder = _Builder(definitions)
    if root["type"] != "model":
        raise Unsupported(f"ExperimentSpec: core schema {root['type']!r}")
    name = builder.model(root, "ExperimentSpec")
    return {"ROOT": name, "MODELS": builder.models}


def plan_text(plan: dict | None = None) -> str:
    """The generated module's text."""
    plan = plan or build_plan()
    body = pprint.pformat(plan["MODELS"], width=118, sort_dicts=False)
    return (f'"""GENERATED by `{REGEN}` from launcher.spec: do not edit (tests fail when it is stale).\n\n'
            "The validation plan launcher.fastspec follows; its format: launcher.spec_plan.\n"
            '"""\n\n'
            "# fmt: off\n"
            f"ROOT = {plan['ROOT']!r}\n\n"
            f"MODELS = {body}\n")


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, description=__doc__.split("\n\n")[0], path=PLAN_PATH, text=plan_text,
                          sources="launcher.spec", regen=REGEN)


if __name__ == "__main__":
    sys.exit(main())
