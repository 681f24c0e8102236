"""Validation failures as `Problem(field, expected, got)`: pydantic's errors and the cross-field rules' alike,
one line each (`format_problems`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pydantic import ValidationError




class Problem(NamedTuple):
    """One validation failure: which field, what was expected, what was given.

    A NamedTuple rather than a frozen dataclass: `dataclasses` imports `inspect` (~8 ms of a fresh
    `launcher render`, which runs these rules)."""

    field: str
    expected: str
    got: Any

    def __str__(self) -> str:
        # A field path built from a user's mapping key may hold control characters: escape them so
        # the message stays one line.
        field = self.field if self.field.isprintable() else self.field.encode("unicode_escape").decode()
        return f"{field}: expected {self.expected}, got {_show(self.got)}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def format_problems(problems: list[Problem]) -> str:
    """One line per problem, prefixed for a terminal."""
    return "\n".join(f"  - {p}" for p in problems)


class _Redacted(str):
    def __repr__(self) -> str:
        return str(self)





def problems_from_pydantic(exc: ValidationError) -> list[Problem]:
    """Translate pydantic's errors into `Problem`s with dotted field paths."""
    out = []
    for err in exc.errors(include_url=False):
        loc = [str(part) for part in err["loc"]]
        # pydantic marks a bad mapping key with a trailing "[key]" location element
        field = ".".join(loc[:-1]) + " (key)" if loc and loc[-1] == "[key]" else ".".join(loc) or "<root>"
        kind = err["type"]
        if kind == "extra_forbidden":
            expected = "a known key (this one does not exist; misspelled? see `launcher schema`)"
        elif kind == "missing":
            expected = "a value (required)"
        elif kind == "string_pattern_mismatch" and loc[:2] == ["verl", "overrides"]:
            expected = HYDRA_OVERRIDE_EXPECTED
        elif kind == "string_pattern_mismatch" and loc == ["reward", "function", "path"]:
            expected = REWARD_PATH_EXPECTED
        else:
            expected = _expected_from_pydantic(err)
        secretish = bool(loc) and (loc[0] == "secrets" or any(part in _SECRET_FIELDS for part in loc))
        if secretish and kind in ("model_type", "dict_type"):
            expected = "a reference to an existing Secret, {name: SECRET, key: KEY} (never the token itself)"
        got = err.get("input")
        if secretish and got is not None:
            # Someone pasted a token where a Secret reference belongs: say so without echoing it.
            got = _Redacted(f"<redacted {type(got).__name__}>")
        out.append(Problem(field, expected, got))
    return out


HYDRA_OVERRIDE_EXPECTED = ("a Hydra override KEY=VALUE, +KEY=VALUE, ++KEY=VALUE or ~KEY (a dotted verl key such as "
                           "actor_rollout_ref.rollout.max_num_batched_tokens, a printable value)")

REWARD_PATH_EXPECTED = "pkg://<dotted.module> (a module in the image) or a local Python file such as ./my_reward.py"

# Fields holding a Secret reference outside `secrets:`: a value pasted there is never echoed.
_SECRET_FIELDS = frozenset({"username", "password", "token", "api_key", "secret_key_ref"})



def _expected_from_pydantic(err: dict) -> str:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "string_pattern_mismatch":
        return f"a string matching {ctx.get('pattern')}"
    if kind == "literal_error":
        return f"one of {ctx.get('expected')}"
    for bound, word in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        if bound in ctx:
            return f"a number {word} {ctx[bound]}"
    return err["msg"][0].lower() + err["msg"][1:]
