"""Validate a config without pydantic when it is plainly valid: the fast path of `render` and `validate`.

Importing pydantic and building the spec's models costs a fresh process ~100-150 ms, several times
what the rendering itself takes. This module follows `launcher._spec_plan`, a transcription of the
model's own core schema generated from `launcher.spec` (`launcher.spec_plan`; tests fail when it is
stale), and is deliberately narrower than pydantic:

- it accepts only input that pydantic would accept *as is*: exact types (an int where an int is due, or
  where a float is due; a str; a bool; a list; a dict with str keys), constraints met, no unknown keys;
- anything else — a lax coercion pydantic would make (`"8"` for an int, `1e-6` read by YAML as a str),
  a value out of range, a misspelled key, a string its regex translation cannot judge with certainty —
  makes `validate` return None, and the caller validates with pydantic, whose result (and error
  messages) are then the only answer.

So when this module says yes, pydantic says yes with the same data: `validate(raw)` equals
`ExperimentSpec.model_validate(raw).model_dump(mode="json")`, key order included (tests/test_fastspec.py
checks it on valid, boundary and hostile inputs). `view` wraps that data in read-only objects with the
model's attribute names and its derived properties (`launcher.spec_derived`), which is all `render`,
`check_rules` and `verl_args` read. Nothing here imports pydantic.
"""

from __future__ import annotations

import math
import re
from typing import Any

from launcher._spec_plan import MODELS, ROOT
from launcher.spec_derived import DERIVED

_MAX_EXACT_FLOAT_INT = 2**53  # an int beyond this would not convert to float exactly: let pydantic judge it


class _Unsure(Exception):
    """The input is outside what this module can judge exactly: pydantic decides."""


def validate(raw: Any) -> dict | None:
    """The validated spec as `model_dump(mode="json")` would give it, or None: ask pydantic."""
    try:
        return _model(ROOT, raw)
    except _Unsure:
        return None


# --------------------------------------------------------------------------------------------------
# The checks, one per plan node kind


def _check(node: tuple, value: Any) -> Any:
    kind = node[0]
    if kind == "str":
        return _str(node, value)
    if kind == "nullable":
        return None if value is None else _check(node[1], value)
    if kind == "int":
        if type(value) is not int:
            raise _Unsure
        return _bounded(node, value)
    if kind == "float":
        if type(value) is int and abs(value) <= _MAX_EXACT_FLOAT_INT:
            value = float(value)  # what pydantic's float validation does with an int
        elif type(value) is not float or not math.isfinite(value):
            raise _Unsure
        return _bounded(node, value)
    if kind == "bool":
        if type(value) is not bool:
            raise _Unsure
        return value
    if kind == "literal":
        if type(value) is not str or value not in node[1]:
            raise _Unsure
        return value
    if kind == "model":
        return _model(node[1], value)
    if kind == "list":
        if type(value) is not list:
            raise _Unsure
        _length(node[2], node[3], value)
        return [_check(node[1], item) for item in value]
    if kind == "dict":
        if type(value) is not dict:
            raise _Unsure
        _length(node[3], node[4], value)
        return {_check(node[1], k): _check(node[2], v) for k, v in value.items()}
    if kind == "json":
        return _json(value)
    if kind == "none":
        if value is not None:
            raise _Unsure
        return None
    raise _Unsure  # a kind this version does not know: never guess


def _model(name: str, value: Any) -> dict:
    if type(value) is not dict:
        raise _Unsure
    fields = MODELS[name]
    if len(value) > len(fields) or not all(type(k) is str for k in value):
        raise _Unsure
    out = {}
    seen = 0
    for field, node, required, default in fields:
        if field in value:
            out[field] = _check(node, value[field])
            seen += 1
        elif required:
            raise _Unsure
        else:
            out[field] = _copy_json(default)
    if seen != len(value):  # a key that is no field: extra="forbid"
        raise _Unsure
    return out


def _bounded(node: tuple, value: int | float) -> int | float:
    ge, gt, le, lt = node[1:5]
    if ((ge is not None and not value >= ge) or (gt is not None and not value > gt)
            or (le is not None and not value <= le) or (lt is not None and not value < lt)):
        raise _Unsure
    return value


def _length(low: int | None, high: int | None, value: list | dict) -> None:
    if (low is not None and len(value) < low) or (high is not None and len(value) > high):
        raise _Unsure


def _str(node: tuple, value: Any) -> str:
    if type(value) is not str:
        raise _Unsure
    _, low, high, pattern = node
    if (low is not None and len(value) < low) or (high is not None and len(value) > high):
        raise _Unsure
    if not value.isascii():
        try:
            value.encode("utf-8")  # a lone surrogate: pydantic's Rust side would refuse what `re` accepts
        except UnicodeEncodeError:
            raise _Unsure from None
    if pattern is not None:
        if "\\s" in pattern and _WS_DIFFERENCE.search(value):
            raise _Unsure
        if not _regex(pattern).search(value):
            raise _Unsure
    return value


def _json(value: Any) -> Any:
    """pydantic's JsonValue, restricted to what YAML gives and JSON can carry unchanged."""
    kind = type(value)
    if value is None or kind in (str, bool, int):
        if kind is str:
            _str(("str", None, None, None), value)
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Unsure
        return value
    if kind is list:
        return [_json(item) for item in value]
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise _Unsure
        return {_str(("str", None, None, None), k): _json(v) for k, v in value.items()}
    raise _Unsure


def _copy_json(value: Any) -> Any:
    if type(value) is dict:
        return {k: _copy_json(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy_json(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# Patterns: pydantic matches with Rust's `regex` crate; Python's `re` reads the spec's patterns alike once
# the Rust-only `\x{...}` escapes and the final `$` (end of text in Rust; `re` would also match before a
# final newline) are translated. A pattern with anything else that could read differently is not translated,
# and a value checked against it is left to pydantic.

_NEVER = re.compile(r"(?!)")
# `\s`: Python's Unicode whitespace is Rust's plus \x1c-\x1f; a value holding those is left to pydantic
_WS_DIFFERENCE = re.compile("[\x1c-\x1f]")
_HEX_BRACED = re.compile(r"\\x\{([0-9a-fA-F]{1,6})\}")
_compiled: dict[str, re.Pattern] = {}


def _regex(pattern: str) -> re.Pattern:
    found = _compiled.get(pattern)
    if found is None:
        found = _compiled[pattern] = _translate(pattern)
    if found is _NEVER:
        raise _Unsure
    return found


def _translate(pattern: str) -> re.Pattern:
    """`^BODY$` with a BODY both engines read alike, as a Python pattern; else one that makes every value unsure."""
    if not (pattern.startswith("^") and pattern.endswith("$")) or not _portable(pattern[1:-1]):
        return _NEVER

    def escape(m: re.Match) -> str:
        code = int(m.group(1), 16)
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"

    return re.compile("^" + _HEX_BRACED.sub(escape, pattern[1:-1]) + r"\Z")


def _portable(body: str) -> bool:
    r"""Literals, groups, quantifiers, flat classes, escaped punctuation, `\xHH`/`\x{...}` and `\s`: nothing else.

    Not `$` or `\z` inside, flags or look-arounds (`(?`), nested or POSIX classes, Rust's class set operations
    (`&&`, `--`, `~~`), `\d`/`\w`/`\b` (whose Unicode sets differ between the engines)."""
    i, in_class = 0, False
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            m = _HEX_BRACED.match(body, i)
            if m:
                i = m.end()
                continue
            nxt = body[i + 1:i + 2]
            if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", body[i + 2:i + 4]):
                i += 4
                continue
            if nxt not in ("-", "\\", ".", "/", "^", "$", "s", "[", "]", "(", ")", "+", "*", "?", "{", "}", "|"):
                return False
            i += 2
            continue
        if ch == "$" or (ch == "(" and body[i + 1:i + 2] == "?"):
            return False
        if ch == "[":
            if in_class or body[i + 1:i + 2] == ":":
                return False
            in_class = True
            if body[i + 1:i + 2] == "^":
                i += 1
            if body[i + 1:i + 2] == "]":  # a literal ']' first in a class: read differently, refuse
                return False
        elif ch == "]" and in_class:
            in_class = False
        elif in_class and body[i:i + 2] in ("&&", "--", "~~"):
            return False
        i += 1
    return not in_class


# --------------------------------------------------------------------------------------------------
# Read-only views with the model's attributes and derived properties


class SpecView:
    """One validated section: its fields as attributes (sections as views, lists of sections as lists of
    views), the derived properties of its `launcher.spec` model, and `model_dump(mode="json")`."""

    __slots__ = ("__dict__",)
    _plan: tuple = ()

    def __init__(self, data: dict):
        object.__setattr__(self, "_data", data)
        for field, node, _required, _default in self._plan:
            object.__setattr__(self, field, _wrap(node, data[field]))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only (render is pure)")

    def model_dump(self, *, mode: str = "json") -> dict:
        """The section's data, as pydantic's `model_dump(mode="json")` gives it (a copy)."""
        if mode != "json":
            raise ValueError("a fastspec view dumps JSON data only")
        return _copy_json(self._data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


_views: dict[str, type[SpecView]] = {}


def _view_class(name: str) -> type[SpecView]:
    cls = _views.get(name)
    if cls is None:
        mixin = DERIVED.get(name)
        bases = (mixin, SpecView) if mixin else (SpecView,)
        cls = _views[name] = type(name + "View", bases, {"__slots__": (), "_plan": MODELS[name]})
    return cls


def _wrap(node: tuple, value: Any) -> Any:
    kind = node[0]
    if kind == "model":
        return _view_class(node[1])(value)
    if kind == "nullable":
        return None if value is None else _wrap(node[1], value)
    if kind == "list" and _holds_model(node[1]):
        return [_wrap(node[1], item) for item in value]
    if kind == "dict" and _holds_model(node[2]):
        return {k: _wrap(node[2], v) for k, v in value.items()}
    return value


def _holds_model(node: tuple) -> bool:
    return node[0] == "model" or (node[0] == "nullable" and _holds_model(node[1]))


def view(data: dict) -> SpecView:
    """The whole spec as a view (an `ExperimentSpecView`, with `spec.ExperimentSpec`'s properties)."""
    return _view_class(ROOT)(data)


def load(raw: Any) -> SpecView | None:
    """`view(validate(raw))`, or None when pydantic has to decide."""
    data = validate(raw)
    return None if data is None else view(data)
