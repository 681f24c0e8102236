"""Streaming parser for verl's console metric lines (bytes in, `StepRecord`s out).

verl 0.9.1 prints one line per logged step from `LocalLogger.log` (`concat_dict_to_str`, see
`/work/shared/notes/verl.md` §5). Inside a Kubernetes pod that line reaches the log wrapped in up to
three prefixes, and tqdm's progress bar may share the physical line through carriage returns.

Grammar (one *fragment* = the text between two of `\\n`, `\\r`, `\\r\\n`; see `LineSplitter`)::

    fragment   := [timestamp] [ansi* [ray_prefix] ansi* [" "]] metric_line
    timestamp  := date "T" time ("Z" | ("+"|"-") hh ":" mm) " " [("stdout" | "stderr") " " ("F" | "P") " "]
                  # kubectl logs --timestamps, or a raw CRI log-file line (a CRI "P" partial line is
                  # not joined to its continuation: kubelet splits only lines over 16 KiB)
    ansi       := ESC "[" [0-9;]* "m"                     # Ray colours the prefix even without a TTY;
                                                          # only leading codes are removed
    ray_prefix := "(" [actor " "] "pid=" digits [", ip=" not-")"*] ")"
                  # actor: TaskRunnerV1 (v1 trainer), TaskRunner (legacy) or any other word
    metric_line:= "step:" digits (" - " item)*
    item       := key ":" value                           # split on the LAST ":" of the item
    key        := any non-empty text without " - "        # verl keys use "/", "@", "-", "_"
    value      := number | "np." type "(" number ")"      # numpy >= 2 repr via pprint.pformat
                | "np." type "('" number "')"             # np.longdouble repr
                | "True" | "False" | "np.True_" | "np.False_"
    number     := int | float                             # Python repr: 3712, 0.625, 1e-06, -1.5e+20,
                                                          # nan, inf, -inf
    type       := float16|float32|float64|longdouble|int8..int64|uint8..uint64

A fragment whose metric_line does not begin with `step:` is noise. A fragment that begins with
`step:` but has an item that does not fit the grammar is *malformed* and is skipped whole: a torn
line (container killed mid-print, line-length cap hit) usually still parses item by item up to the
tear, and a silently shortened row is worse than a missing one.

Values keep their Python type: ints stay `int` (so `training/global_step` is 3, not 3.0), floats
are `float` (including nan/inf), booleans `bool`. Keys are verl's, unchanged.

Memory is bounded: `LineSplitter` never holds more than one pending line of at most
`max_line_bytes` plus the chunk being fed; longer lines are dropped and counted as truncated.

Speed: `LogParser` keeps fragments as bytes and reads the step lines of a fed chunk ~256 KB at a time with one
`orjson.loads` (`_records_batch`), falling back line by line (`_parse`: `_items_fast`, then the per-item reference
`_items`) wherever the batch could read differently; `parse_line` is the per-line path. Both give the same records.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from itertools import chain, repeat

import orjson

# Longest physical line we keep. A full exp3 training line is ~3.3 KB; validation over many data
# sources can add a few KB. 1 MiB leaves room for anything verl prints and bounds memory against a
# runaway line (a 2 GB blob without a newline).
MAX_LINE_BYTES = 1 << 20

_STEP = "step:"
_SEP = " - "

# Optional prefixes, applied only when the fragment does not already start with "step:".
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d) (?:(?:stdout|stderr) [FP] )?")
# Leading colour codes, Ray's "(Actor pid=N[, ip=X])" and the reset code after it. Only the start
# of the line is examined: verl never colours the metric text itself, and scanning a 3 KB line for
# escapes would cost more than the rest of the parse.
_RAY_PREFIX = re.compile(
    r"(?:\x1b\[[0-9;]*m)*(?:\((?:[\w.:-]+ )?pid=\d+(?:, ip=[^)]*)?\))?(?:\x1b\[[0-9;]*m)* ?"
)
_NP_WRAPPED = re.compile(
    r"np\.(?:float(?:16|32|64|128)?|longdouble|u?int(?:8|16|32|64)?|longlong|intc|intp)"
    r"\('?([^()']*)'?\)"
)
_INT = re.compile(r"-?\d+")
# Python/numpy float repr only: rejects "1_0", " 1", "infinity" that float() would accept.
_FLOAT = re.compile(r"-?(?:\d+\.\d+(?:e[+-]\d+)?|\d+e[+-]\d+|inf|nan)")

_BOOLS = {"True": True, "False": False, "np.True_": True, "np.False_": False}


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One parsed `step:N - ...` line: verl's step number and its metrics, keys unchanged."""

    step: int
    metrics: dict[str, int | float | bool]


@dataclass(slots=True)
class ParseCounters:
    """What the parser saw. All counts are of fragments (`\\r`/`\\n`-separated pieces)."""

    lines: int = 0  # fragments handed to the parser, including noise and skipped ones
    records: int = 0  # parsed step lines
    noise: int = 0  # fragments that are not metric lines (config dump, tqdm, warnings, blanks)
    malformed: int = 0  # started with "step:" but did not fit the grammar: skipped
    non_utf8: int = 0  # invalid UTF-8: skipped
    truncated: int = 0  # longer than max_line_bytes, or cut off by reset(): skipped

    def add(self, other: ParseCounters) -> None:
        """Add `other`'s counts into this one (used to total several streams)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_SLOW_CACHE: dict[str, int | float | bool] = {}  # value text -> value, for non-fast-path texts
_MALFORMED = object()  # sentinel from _parse: looked like a metric line but was not one


def parse_value(text: str) -> int | float | bool | None:
    """Parse one rendered value (`0.625`, `np.float64(nan)`, `3712`, `True`); None if not a value."""
    if text[:3] == "np.":
        b = _BOOLS.get(text)
        if b is not None:
            return b
        m = _NP_WRAPPED.fullmatch(text)
        if m is None:
            return None
        text = m.group(1)
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return _BOOLS.get(text)


def _strip_prefixes(line: str) -> str:
    """Remove a kubectl/CRI timestamp, ANSI colour codes and a Ray actor prefix, if present."""
    if line[:1].isdigit():
        m = _TIMESTAMP.match(line)
        if m:
            line = line[m.end() :]
            if line.startswith(_STEP):
                return line
    if line[:1] in "(\x1b":
        line = line[_RAY_PREFIX.match(line).end() :]  # the pattern also matches "", never None
    return line


# Ray prefixes (`\x1b[36m(TaskRunnerV1 pid=6402)\x1b[0m `) repeat on every line of an actor: `LogParser` matches
# each distinct text before the first `step:` once. The prefix patterns cannot match across `step:` (`_prefix_only`),
# so `_strip_prefixes(line)` removes exactly that text whenever it removes it from `head + "step:"`. Timestamped
# heads (a digit first) differ on every line and are not kept.
_PREFIX_SEEN: dict[bytes, bool] = {}


def _prefix_only(head: str) -> bool:
    """True when `head` (the text before a line's first `step:`) is all prefix: a step line begins after it."""
    return _strip_prefixes(head + _STEP) == _STEP


def _parse(line: str):
    """StepRecord, None (noise) or _MALFORMED. Callers should fast-path lines without 'step:'."""
    if not line.startswith(_STEP):
        line = _strip_prefixes(line)
        if not line.startswith(_STEP):
            return None
    head, sep, rest = line.partition(_SEP)
    num = head[5:]
    if not num.isdigit() or not num.isascii():
        # "step:12abc", "step: 3" or a sentence mentioning "step:" after prefixes: not ours
        return _MALFORMED if num[:1].isdigit() else None
    if not sep:
        return StepRecord(int(num), {})
    metrics = _items_fast(rest)
    if metrics is None:
        metrics = _items(rest)
        if metrics is None:
            return _MALFORMED
    return StepRecord(int(num), metrics)


def _items(rest: str) -> dict[str, int | float | bool] | None:
    """The items after `step:N - `, one at a time (the reference semantics); None if one is malformed."""
    metrics: dict[str, int | float | bool] = {}
    for item in rest.split(_SEP):
        key, colon, text = item.rpartition(":")
        if not colon or not key:
            return None
        # Fast path for the common plain float ("0.625"); parse_value handles the rest. The
        # guards keep float()'s extra leniency ("1_0.5", " 1.5", "126.") out of the fast path.
        if "." in text and text[-1:].isdigit() and "_" not in text and " " not in text:
            try:
                value = float(text)
            except ValueError:
                return None
        else:
            # np.int32(2), 3712, 1e-06, nan: few distinct texts per run, so memoise (bounded)
            value = _SLOW_CACHE.get(text)
            if value is None:
                value = parse_value(text)
                if value is not None and len(_SLOW_CACHE) < 4096:
                    _SLOW_CACHE[text] = value
        if value is None:
            return None
        metrics[key] = value
    return metrics


# `_items_fast` rewrites the items as one JSON object and lets orjson build the dict in C
# (`k1:v1 - k2:v2` -> `{"k1":v1,"k2":v2}`), about twice as fast as `_items` on verl's lines. It answers only
# when the result is provably what `_items` gives, else None (and `_items` decides). Why that holds:
# - no `"`, `\` or JSON whitespace outside the separators: keys need no escaping, values carry no blanks;
# - `:` becomes `":`, so every text colon is preceded by a quote and no key can contain one; in a valid
#   object of numbers the separators' opening quotes and the colons' closing quotes must then alternate,
#   so each item has exactly one colon: its key is the text before it, as `rpartition` gives, and its
#   value the text after it;
# - a JSON number reads as `_items` reads it, except an exponent without a fraction, which `_items` takes
#   only as `1e-06` (lower-case `e` and a sign): any `E`, or `e` before a digit, goes to `_items`;
# - a numpy repr is unwrapped only when its inner text is a number both grammars read alike;
# - an empty key, a duplicate key (where `_items` keeps the first position and the last value) and an
#   integer beyond 64 bits (orjson makes it a float) go to `_items`.
# tests/test_metrics_parser.py checks the two against each other on generated lines.
_NP_HEAD = re.compile(
    r"(?:float(?:16|32|64|128)?|longdouble|u?int(?:8|16|32|64)?|longlong|intc|intp)"
    r"\('?(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:e[+-][0-9]+)?)'?\)"
)
_NP_SEEN: dict[str, str] = {}  # `int32(2` -> `2`: numpy reprs already matched by _NP_HEAD (bounded)
_E_DIGIT = re.compile(r"e[0-9]")
_NUMBER_TYPES = frozenset({int, float})
_INT64 = 2.0**63  # orjson reads a wider integer as a float; `_items` keeps it an int


def _items_fast(rest: str) -> dict[str, int | float] | None:
    """`_items(rest)` built by orjson for a line of plain keys and numbers; None when `_items` must decide."""
    # JSON skips blanks around a value where `_items` refuses them: any blank outside a separator declines
    if '"' in rest or "\\" in rest or "E" in rest or "\t" in rest or "\n" in rest or "\r" in rest:
        return None
    body = rest.replace(_SEP, ',"').replace(":", '":')
    if " " in body:
        return None
    if "(" in rest:  # a numpy repr, maybe (one memchr, where looking for `":np.` costs a scan per quote)
        body = _unwrap_np(body)
        if body is None:
            return None
    if _E_DIGIT.search(body):
        return None
    try:
        metrics = orjson.loads('{"' + body + "}")
    except orjson.JSONDecodeError:  # (a ValueError: lone surrogates, overflow, anything not JSON)
        return None
    values = metrics.values()
    if len(metrics) != rest.count(":") or "" in metrics or not _NUMBER_TYPES.issuperset(map(type, values)) \
            or max(values) >= _INT64 or min(values) <= -_INT64:
        return None
    return metrics


def _unwrap_np(body: str) -> str | None:
    """`":np.int32(2)` -> `":2` for every numpy repr in `body`; None if one is not a plain number inside.

    A run repeats a few reprs (`np.int32(2)` on every line), so each distinct one is matched once."""
    parts = body.split('":np.')
    for i in range(1, len(parts)):
        head, paren, tail = parts[i].partition(")")
        if not paren or (tail and tail[:2] != ',"'):
            return None  # no closing parenthesis, or text after it inside the same value
        inner = _NP_SEEN.get(head)  # (the memo is keyed by what precedes a closing parenthesis only)
        if inner is None:
            m = _NP_HEAD.fullmatch(head + ")")
            if m is None:
                return None
            inner = m.group(1)
            if len(_NP_SEEN) < 4096:
                _NP_SEEN[head] = inner
        parts[i] = inner + tail
    return '":'.join(parts)


# `_records_batch` reads many step lines with ONE `orjson.loads`: the texts after their `step:` become one JSON array
# (`[{"step":N ,"k1":v1 ,"k2":  2 },{...}]`) with a few whole-batch operations, numpy comparisons over the bytes and one
# `bytes.replace` (for the colons), so nothing is paid per line or per item in Python. It answers only when every
# line's record is provably `_parse`'s (else None, and each line goes through `_parse`). Why that holds, given the
# checks it makes:
# - no `"`, `\`, `{`, `}`, `[`, `]`, tab or `E` in any text (and none holds CR or LF: they are split fragments): the only
#   quotes and braces of the array text are the inserted ones, keys need no escapes, and values carry no blanks;
# - every blank is one of a ` - ` (counted, and no two of them overlap), so the separators are exactly the ones
#   `str.split(" - ")` finds left to right; each becomes ` ,"` in place (a blank is JSON whitespace);
# - each `(` must open `:np.TYPE(` (TYPE: int32, int64, float32, float64; a subset of `_NP_WRAPPED`'s) and be closed by
#   the next `)` with only number characters between (parentheses strictly alternate); the head and the `)` become
#   blanks. JSON then reads a value only as `N` or `np.TYPE(N)` with N one JSON number token and nothing else in the
#   item, which is how `_items` reads it (`parse_value` unwraps the repr and reads N as an int or a float);
# - each `:` becomes `":` (the one `bytes.replace`): as in `_items_fast`, valid JSON then means exactly one colon per
#   item, so `_items`' `rpartition` splits where JSON does, and the number of keys equals the number of colons only
#   without duplicate keys (`_items` keeps the first position and the last value: declined). `step` is a key like the
#   others, so a metric named `step` declines too;
# - a JSON number reads as `_items` reads it except an exponent without a sign (`1e5`, which `_items` refuses without a
#   `.`, and `parse_value` refuses inside a repr): `e` before a digit declines, as does `E` (above);
# - `true`/`false` could only follow a colon directly (blanks come only from separators and numpy heads), so a colon
#   before `t` or `f` declines; `hypot` refuses anything but numbers (`null`) and bounds every value below 2**63,
#   where orjson reads integers as `_items` does (wider ones become floats); an empty key declines;
# - the step: `LogParser` only sends texts whose first byte is an ASCII digit, so JSON reads it as a number; it must be
#   an int (`1.5`, `1e-05` and integers beyond 64 bits are floats: declined), and JSON refuses leading zeros and any
#   text after the number but a separator, so it is `num.isdigit()`'s number (`step:N` alone gives `{"step":N}`).
# Whole-array numpy operations cost ~0.05 us per 2.5 KB line each; position lists (`nonzero`) are slower per byte, so
# they are taken only of the rare parentheses, from a mask packed 8 bytes to a word.
# tests/test_metrics_parser.py checks batches against `_parse` line by line on generated lines.
_BATCH_BYTES = 1 << 18  # text per orjson.loads (~100 verl lines; a whole 1 MiB read as one text was slower)
_MIN_BATCH = 4  # fewer lines (a follower's one line at a time): the per-line path, without numpy's call costs
_NP_HEADS = (b":np.int32", b":np.int64", b":np.float32", b":np.float64")  # the reprs verl's metrics hold
_HEAD_WINDOW = 11  # bytes before `(` compared: the longest head above
_np = None  # numpy, imported on the first batch (importing launcher.metrics, or a short follow, does not load it)
_HEAD_PAT = _HEAD_MASK = _NUMBER_BYTE = None


def _numpy():
    """numpy and the constant arrays of `_records_batch`, built on first use."""
    global _np, _HEAD_PAT, _HEAD_MASK, _NUMBER_BYTE
    if _np is None:
        import numpy as np

        _HEAD_PAT = np.array([list(h.rjust(_HEAD_WINDOW, b"\0")) for h in _NP_HEADS], np.uint8)
        _HEAD_MASK = np.array([[i >= _HEAD_WINDOW - len(h) for i in range(_HEAD_WINDOW)] for h in _NP_HEADS])
        _NUMBER_BYTE = np.zeros(256, bool)
        _NUMBER_BYTE[list(b"-+.e0123456789")] = True
        _np = np
    return _np


class _Scratch:
    """Work arrays for `_records_batch`, kept between batches (one set per `LogParser`: numpy releases the GIL).

    Fresh arrays of a batch's size are mapped and faulted in page by page each time: that cost more than the
    comparisons themselves. The arrays grow to the largest batch, which `_BATCH_BYTES` and the line cap bound."""

    def __init__(self) -> None:
        self.size = 0

    def arrays(self, np, n: int):
        """Four bool arrays and one uint8 array of at least `n + 8` elements (whole 8-byte words)."""
        if n + 8 > self.size:
            self.size = (n + 8 + 0xFFFF) & ~0xFFFF
            self.bools = [np.zeros(self.size, bool) for _ in range(4)]
            self.bytes = np.zeros(self.size, np.uint8)
        return (*self.bools, self.bytes)


def _records_batch(tails: list[bytes], scratch: _Scratch) -> list[StepRecord] | None:
    """`[_parse("step:" + t) for t in tails]` from one `orjson.loads`, or None when a line might read differently.

    Each tail is a step line's text after its `step:`, starting with an ASCII digit."""
    flat = b"".join(tails)
    if b'"' in flat or b"\\" in flat or b"{" in flat or b"}" in flat or b"[" in flat or b"]" in flat \
            or b"\t" in flat or b"E" in flat:
        return None
    np = _numpy()
    buf = bytearray(b'},{"step:').join(tails)
    buf[:0] = b'[{"step:'
    buf += b"}]"
    a = np.frombuffer(buf, np.uint8)
    n = len(a)
    b1, b2, b3, b4, u = scratch.arrays(np, n)
    # separators: sep[i] when " - " starts at i (b2); every blank must be in exactly one
    blank = np.equal(a, 32, out=b1[:n])
    sep = np.equal(a[1:-1], 45, out=b2[: n - 2])
    sep &= blank[:-2]
    sep &= blank[2:]
    if np.count_nonzero(blank) != 2 * np.count_nonzero(sep) or np.logical_and(sep[:-2], sep[2:], out=b3[: n - 4]).any():
        return None  # a blank outside a separator, or two separators sharing one
    a[1:-1] -= sep  # "-" -> ","
    a[2:] += sep
    a[2:] += sep  # " " -> '"'
    if not _unwrap_heads(np, a, b1, b2):
        return None
    # e+digit (uint8 wraps below "0"); ":" + "t"/"f" (`| 18` also maps "d" and "v" there: declining more is safe)
    x, y, bad, other, t = a[:-1], a[1:], b1[: n - 1], b2[: n - 1], u[: n - 1]
    np.equal(x, 101, out=bad)
    bad &= np.less(np.subtract(y, 48, out=t), 10, out=other)
    np.equal(x, 58, out=other)
    other &= np.equal(np.bitwise_or(y, 18, out=t), 118, out=b3[: n - 1])
    if (bad | other).any():
        return None
    plain = len(buf)
    body = buf.replace(b":", b'":')
    try:
        batch = orjson.loads(body)
        if len(batch) != len(tails) or sum(map(len, batch)) != len(body) - plain \
                or any(map(dict.__contains__, batch, repeat(""))):
            return None
        steps = list(map(dict.pop, batch, repeat("step")))
        if float in set(map(type, steps)) \
                or not math.hypot(*chain.from_iterable(map(dict.values, batch))) < _INT64:
            return None
    except (ValueError, TypeError, OverflowError):  # not JSON; not a list of objects; a value that is not a number
        return None
    return list(map(StepRecord, steps, batch))


def _unwrap_heads(np, a, b1, b2) -> bool:
    """Blank every `np.TYPE(` and its `)` in `a` (uint8); False if one is not a plain repr. b1, b2: scratch."""
    n = len(a)
    words = -(-n // 8) * 8
    paren = b1[:words]
    paren[n:] = False
    np.equal(a, 40, out=paren[:n])
    paren[:n] |= np.equal(a, 41, out=b2[:n])
    if not paren.any():
        return True
    # positions of the few parentheses, from the mask packed 8 bytes to a word (`nonzero` is slow per byte)
    word = np.flatnonzero(paren.view(np.uint64) != 0)
    row, col = np.nonzero(paren.reshape(-1, 8)[word])
    at = word[row] * 8 + col
    p, q = at[0::2], at[1::2]
    if len(p) != len(q) or (a[p] != 40).any() or (a[q] != 41).any():
        return False  # parentheses that do not alternate "(", ")"
    inner = q - p - 1
    if inner.min() < 1 or inner.max() > 40:
        return False
    k = np.arange(inner.max())
    if not (_NUMBER_BYTE[a.take(p[:, None] + 1 + k, mode="clip")] | (k >= inner[:, None])).all():
        return False  # something other than number characters inside
    window = a.take(p[:, None] + np.arange(-_HEAD_WINDOW, 0), mode="clip")
    hit = ((window[:, None, :] == _HEAD_PAT) | ~_HEAD_MASK).all(2)
    if not hit.any(1).all():
        return False  # not one of _NP_HEADS right after a colon
    a[(p[:, None] + np.arange(-8, 1)).ravel()] = 32  # "np.int32(" (and the last 9 bytes of "np.float64(")
    floats = p[hit[:, 2] | hit[:, 3]]
    a[floats - 10] = 32
    a[floats - 9] = 32
    a[q] = 32
    return True


def parse_line(line: str) -> StepRecord | None:
    """Parse one fragment (no `\\r`/`\\n` inside); None for noise and for malformed metric lines.

    Accepts the grammar in the module docstring. Use `LogParser` to also count what was skipped.
    """
    if _STEP not in line:
        return None
    rec = _parse(line)
    return rec if isinstance(rec, StepRecord) else None


class LineSplitter:
    """Incremental bytes -> text fragments, split on `\\n`, `\\r` and `\\r\\n`.

    `feed(chunk)` returns the complete fragments ending in that chunk; a partial fragment is held
    until its terminator arrives. Empty fragments are dropped (`\\r\\n` and blank lines).
    Fragments that are not valid UTF-8 or are longer than `max_line_bytes` are skipped and counted
    in `counters.non_utf8` / `counters.truncated`; neither is ever fatal.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES, counters: ParseCounters | None = None):
        self.max_line_bytes = max_line_bytes
        self.counters = counters if counters is not None else ParseCounters()
        self._pending = b""
        self._discarding = False  # inside an over-long line: drop bytes until its terminator

    def feed(self, chunk: bytes) -> list[str]:
        """Add `chunk` and return the fragments it completed, in order."""
        return list(map(bytes.decode, self.feed_bytes(chunk)))

    def finish(self) -> list[str]:
        """End of stream: return the unterminated last fragment, if any (many logs lack a final newline)."""
        return list(map(bytes.decode, self.finish_bytes()))

    def feed_bytes(self, chunk: bytes) -> list[bytes]:
        """`feed`, with the fragments left as bytes (each one valid UTF-8)."""
        if not chunk:
            return []
        if type(chunk) is not bytes:  # bytearray, memoryview: fragments are split as bytes
            chunk = bytes(chunk)
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:
            self._hold(chunk)
            return []
        head = memoryview(chunk)[: cut + 1]  # (no copy of a 1 MiB read before the one `_split` makes)
        data = self._pending + head if self._pending else bytes(head) if cut + 1 < len(chunk) else chunk
        self._pending = b""
        out = self._split(data, drop_first=self._discarding)
        self._discarding = False
        self._hold(chunk[cut + 1 :])
        return out

    def finish_bytes(self) -> list[bytes]:
        """`finish`, with the fragment left as bytes."""
        data, self._pending = self._pending, b""
        discarding, self._discarding = self._discarding, False
        if discarding or not data:
            return []
        return self._split(data + b"\n", drop_first=False)

    def reset(self) -> None:
        """Drop a pending partial fragment (the stream broke; a re-attach will resend the whole line)."""
        if self._pending:  # (an over-long line being discarded was counted when it overflowed)
            self.counters.lines += 1
            self.counters.truncated += 1
        self._pending = b""
        self._discarding = False

    def _hold(self, tail: bytes) -> None:
        if self._discarding or not tail:
            return
        if len(self._pending) + len(tail) > self.max_line_bytes:
            # Count it now, then swallow everything up to the next terminator.
            self._pending = b""
            self._discarding = True
            self.counters.lines += 1
            self.counters.truncated += 1
        else:
            self._pending += tail

    def _split(self, data: bytes, drop_first: bool) -> list[bytes]:
        """`data` ends with a terminator. Split as bytes; fragments stay bytes, checked to be UTF-8.

        One `decode` of the whole block checks every fragment at once (a terminator is never inside a multi-byte
        character); its result is dropped (a block holding one tqdm bar would decode to a wide string)."""
        c = self.counters
        parts = data.replace(b"\r", b"\n").split(b"\n")
        parts.pop()  # the empty piece after the final terminator
        if drop_first and parts:
            parts.pop(0)  # tail of an over-long line, already counted as truncated
        parts = list(filter(None, parts))
        c.lines += len(parts)
        limit = self.max_line_bytes  # in bytes, as `parts` are: counts do not depend on the chunking
        if not parts or max(map(len, parts)) <= limit:
            try:
                data.decode()  # (UTF-8, strict)
                return parts
            except UnicodeDecodeError:  # (maybe only in the dropped piece: each fragment is checked below)
                pass
        out: list[bytes] = []
        for p in parts:
            if len(p) > limit:
                c.truncated += 1
                continue
            try:
                p.decode()
            except UnicodeDecodeError:
                c.non_utf8 += 1
                continue
            out.append(p)
        return out


@dataclass
class LogParser:
    """Splitter + `parse_line` with counters: `feed(bytes) -> [StepRecord]`, constant memory.

    One `LogParser` per byte stream (per pod container attach): partial lines are per stream.
    """

    max_line_bytes: int = MAX_LINE_BYTES
    counters: ParseCounters = field(default_factory=ParseCounters)

    def __post_init__(self) -> None:
        self._splitter = LineSplitter(self.max_line_bytes, self.counters)
        self._scratch = _Scratch()

    def feed(self, chunk: bytes) -> list[StepRecord]:
        """Parse every fragment completed by `chunk`."""
        return self._records(self._splitter.feed_bytes(chunk))

    def finish(self) -> list[StepRecord]:
        """End of stream: parse the unterminated last fragment, if any."""
        return self._records(self._splitter.finish_bytes())

    def reset(self) -> None:
        """The stream broke: drop a partial line (counted as truncated) before re-attaching."""
        self._splitter.reset()

    def feed_lines(self, lines) -> list[StepRecord]:
        """Parse already-split text lines (e.g. from a client that yields `str` lines).

        Each line may still contain `\\r` fragments; they are split here.
        """
        out: list[StepRecord] = []
        frags: list[bytes] = []
        for line in lines:
            for f in line.replace("\r", "\n").split("\n"):
                if f:
                    self.counters.lines += 1
                    if len(f) > self.max_line_bytes:
                        self.counters.truncated += 1
                        continue
                    try:
                        frags.append(f.encode())
                    except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so read as text, in its place
                        out += self._records(frags)
                        frags = []
                        out += self._counted([_parse(f)])
        return out + self._records(frags)

    def _records(self, lines: list[bytes]) -> list[StepRecord]:
        # The texts after `step:` of consecutive step lines are collected and read together (`_records_batch`); a line
        # the batch cannot take (text before `step:` that is not a prefix, a step that does not start with a digit)
        # goes through `_parse`, after the lines before it. Same results as `_parse` line by line.
        out: list[StepRecord] = []
        tails: list[bytes] = []
        noise = 0
        seen = _PREFIX_SEEN
        for line in lines:
            head, step, tail = line.partition(b"step:")
            if not step:  # fast path: config dump, tqdm, warnings
                noise += 1
                continue
            if head:
                known = seen.get(head)
                if known is None:
                    known = _prefix_only(head.decode())
                    if len(seen) < 4096 and head[:1] in b"(\x1b":
                        seen[head] = known
            if not tail[:1].isdigit() or (head and not known):
                if tails:
                    out += self._steps(tails)
                    tails = []
                out += self._counted([_parse(line.decode())])
                continue
            tails.append(tail)
        if tails:
            out += self._steps(tails)
        self.counters.noise += noise
        return out

    def _steps(self, tails: list[bytes]) -> list[StepRecord]:
        """Records of the step lines whose texts after `step:` are `tails` (batch by batch where it answers)."""
        if len(tails) < _MIN_BATCH:
            return self._counted([_parse("step:" + t.decode()) for t in tails])
        out: list[StepRecord] = []
        total = sum(map(len, tails))
        share = total / -(-total // _BATCH_BYTES)  # even batches: no short last one
        start = size = 0
        for i, t in enumerate(tails, 1):
            size += len(t)
            if size >= share or i == len(tails):
                part = tails[start:i]
                got = _records_batch(part, self._scratch)
                if got is None:
                    out += self._counted([_parse("step:" + t.decode()) for t in part])
                else:
                    self.counters.records += len(got)
                    out += got
                start, size = i, 0
        return out

    def _counted(self, parsed: list) -> list[StepRecord]:
        """The records among `_parse` results, the others counted (None: noise; _MALFORMED)."""
        c = self.counters
        out = [r for r in parsed if isinstance(r, StepRecord)]
        malformed = parsed.count(_MALFORMED)
        c.records += len(out)
        c.malformed += malformed
        c.noise += len(parsed) - len(out) - malformed
        return out
