"""Canonical JSON that Go's `encoding/json` (and so Helm's `toJson`/`toPrettyJson`) writes byte for byte.

The job name carries a hash of the spec, and the Helm chart must compute the same hash from its
values (`toJson | sha256sum`) and put the same text into the ConfigMap (`toPrettyJson`). Python's
`json.dumps` differs from Go in exactly the places that matter here, so this encoder follows Go:

- numbers: Helm holds every value-file number as a float64, so an int field (8) and a float field
  (0.0, 1.0) print alike; Go prints floats in ES6 style: positional for 1e-6 <= |x| < 1e21
  (`0.000001`, `0`, `1`), exponent otherwise with no zero padding (`1e-7`, `1e+21`);
- strings: UTF-8 kept as is, `<`, `>`, `&`, U+2028, U+2029 escaped as `\\u00XX`/`\\u2028` (Go's
  HTML-safe default), control characters as `\\n`, `\\r`, `\\t`, `\\b`, `\\f` or `\\u00XX`;
- maps: keys sorted by code point (Go sorts by UTF-8 bytes: the same order);
- `indent`: Go's `MarshalIndent(v, "", "  ")` layout (`"key": value`, empty containers as `{}`/`[]`).

Only JSON-like data (dict with str keys, list, str, int, float, bool, None) is accepted.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f",
            "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_string(text: str) -> str:
    """A JSON string literal as Go's encoding/json writes it (HTML-safe escaping, UTF-8 kept)."""
    out = ['"']
    for ch in text:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("\\ufffd")  # Go replaces invalid UTF-8 (a lone surrogate cannot be encoded)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_number(value: int | float) -> str:
    """A number as Go's encoding/json writes the float64 that Helm holds for it."""
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"non-finite number {value!r} has no JSON form")
    if f == 0:
        return "0"  # also -0.0: Go writes "-0", but no spec field accepts a negative zero that matters
    if 1e-6 <= abs(f) < 1e21:
        # shortest round-trip digits (repr), written positionally without a trailing ".0"
        return format(Decimal(repr(f)).normalize(), "f")
    mantissa, _, exp = repr(f).partition("e")
    sign, digits = (exp[0], exp[1:]) if exp[0] in "+-" else ("+", exp)
    return f"{mantissa}e{sign}{digits.lstrip('0') or '0'}"


def dumps(obj: Any, indent: int | None = None) -> str:
    """Serialise `obj` as Go would: compact (`json.Marshal`) or indented (`json.MarshalIndent`)."""
    parts: list[str] = []
    _encode(obj, parts, indent, 0)
    return "".join(parts)


def _encode(obj: Any, out: list[str], indent: int | None, level: int) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, (int, float)):
        out.append(go_number(obj))
    elif isinstance(obj, str):
        out.append(go_string(obj))
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        for key in obj:
            if not isinstance(key, str):
                raise TypeError(f"map key {key!r}: only string keys have a JSON form")
        items = sorted(obj.items())
        out.append("{")
        for i, (key, value) in enumerate(items):
            if i:
                out.append(",")
            _newline(out, indent, level + 1)
            out.append(go_string(key))
            out.append(": " if indent is not None else ":")
            _encode(value, out, indent, level + 1)
        _newline(out, indent, level)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _newline(out, indent, level + 1)
            _encode(value, out, indent, level + 1)
        _newline(out, indent, level)
        out.append("]")
    else:
        raise TypeError(f"{type(obj).__name__} has no canonical JSON form")


def _newline(out: list[str], indent: int | None, level: int) -> None:
    if indent is not None:
        out.append("\n" + " " * (indent * level))


# Characters JSON may carry raw but YAML may not: PyYAML and Go's YAML refuse DEL, the C1 controls
# and U+FFFE/U+FFFF, and read U+0085 (NEL) as a line break. Inside JSON strings (the only place
# they can occur) they are replaced by their `\\u00XX` escape, which JSON and YAML both read back.
YAML_UNSAFE = [chr(c) for c in range(0x7F, 0xA0)] + ["\ufffe", "\uffff"]
# A number in Go's exponent form without a dot (`1e-7`): YAML 1.1 (PyYAML) reads it as a string.
# Matched only as a whole JSON value at the end of a line of indented output, so never inside a
# string (raw newlines never occur inside one).
EXPONENT_RE = r'(?m)(": |^ *)(-?[0-9]+)(e[-+][0-9]+,?)$'


def yaml_safe_chars(text: str) -> str:
    """Escape the YAML-unsafe characters of JSON (or JSON-flow YAML) text."""
    for ch in YAML_UNSAFE:
        if ch in text:
            text = text.replace(ch, f"\\u{ord(ch):04x}")
    return text


def yaml_document(obj: Any) -> str:
    """Indented canonical JSON that YAML readers parse to the same values (the ConfigMap's spec.yaml).

    Go's `toPrettyJson` text plus the two fixes above; the chart applies the same two (generated
    from these constants by hack/gen_chart.py), so both renderers write identical bytes.
    """
    return re.sub(EXPONENT_RE, r"\1\2.0\3", yaml_safe_chars(dumps(obj, indent=2)))
