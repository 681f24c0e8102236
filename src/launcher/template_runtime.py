"""What the compiled templates (`launcher._templates_compiled`) call at render time, with Jinja's semantics.

The manifests' source stays the Jinja templates in `templates/`; `launcher.template_compile` turns them
into plain Python at build time, so a render imports neither jinja2 nor its lexer, parser and compiler
(~40-60 ms of a fresh process, more than the rest of `launcher render` together). The two helpers here
are the only Jinja behaviour that code needs; tests/test_template_compile.py renders every golden
config both ways and requires byte-identical text.
"""

from __future__ import annotations

from typing import Any


class UndefinedError(Exception):
    """A template read a variable or attribute the renderer did not pass (Jinja's StrictUndefined)."""


def attr(obj: Any, name: str) -> Any:
    """`obj.name` in a template: the attribute, else the item `obj[name]` (Jinja's `Environment.getattr`)."""
    try:
        return getattr(obj, name)
    except AttributeError:
        pass
    try:
        return obj[name]
    except (TypeError, LookupError):
        raise UndefinedError(f"{type(obj).__name__} object has no attribute {name!r}") from None


def indent(s: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """Jinja's `indent` filter (jinja2.filters.do_indent, 3.1), for plain strings."""
    indention = width if isinstance(width, str) else " " * width
    newline = "\n"
    s += newline  # as Jinja does: splitlines() then sees the last line even when it is empty
    if blank:
        rv = (newline + indention).join(s.splitlines())
    else:
        lines = s.splitlines()
        rv = lines.pop(0)
        if lines:
            rv += newline + newline.join(indention + line if line else line for line in lines)
    if first:
        rv = indention + rv
    return rv
