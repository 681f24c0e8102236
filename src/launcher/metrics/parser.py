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

Speed: where the optional C accelerator is built (`_stepjson.c`, `accelerated()`), `LogParser` hands all the
step lines of a feed to `_stepjson.encode`, which checks each against this grammar and writes it as JSON, and
reads them with one `orjson.loads`; a line it declines is read by the reference path below. Without it,
`LogParser` reads the step lines 64 at a time with one `orjson.loads` (`_items_batch`), falling back line by
line (`_items_fast`, then the per-item reference `_items`) wherever the batch could read differently;
`parse_line` is the per-line path. All give the same records.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from itertools import chain, compress, repeat, starmap
from operator import itemgetter

import orjson

try:  # the optional C accelerator (setup.py); without it the pure-Python path gives the same records
    from launcher.metrics._stepjson import encode as _encode
except ImportError:
    _encode = None

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
_PREFIX_SEEN: dict[str, bool] = {}
_PREFIX_OK: set[str] = {""}  # the heads in _PREFIX_SEEN that are all prefix, and no head at all


def _prefix_only(head: str) -> bool:
    """True when `head` (the text before a line's first `step:`) is all prefix: a step line begins after it."""
    return _strip_prefixes(head + _STEP) == _STEP


def _remember_prefix(head: str) -> bool:
    """`_prefix_only(head)`, remembered for Ray-style heads (bounded)."""
    known = _PREFIX_SEEN.get(head)
    if known is None:
        known = _prefix_only(head)
        if len(_PREFIX_SEEN) < 4096 and head[:1] in "(\x1b":
            _PREFIX_SEEN[head] = known
            if known:
                _PREFIX_OK.add(head)
    return known


def _from_step(f: str, at: int) -> str | None:
    """`f` from its `step:` on, when the `at` characters before it are a prefix to strip; else what
    `_strip_prefixes` leaves if that starts with `step:`; None for noise (a sentence that mentions `step:`)."""
    if not at or _remember_prefix(f[:at]):
        return f[at:]
    f = _strip_prefixes(f)
    return f if f.startswith(_STEP) else None


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


def _items_one(rest: str) -> dict[str, int | float | bool] | None:
    """`_items(rest)`, by way of `_items_fast` when it answers."""
    metrics = _items_fast(rest)
    return _items(rest) if metrics is None else metrics


# `_items_batch` reads the items of many step lines with ONE `orjson.loads`: the lines' texts become one JSON
# array of objects (`[{"k1":v1\t,"k2":v2},{...}]`), built with a few whole-batch byte operations, so the
# per-line Python work of `_items_fast` (its replaces, checks and numpy unwrapping) is paid once per batch.
# It answers only when every line's result is provably `_items`' (else None, and each line goes through
# `_items_one`). Why that holds, given the checks it makes on the whole batch:
# - no `"`, `\`, `{`, `}`, `[`, tab, CR or LF in any line: the only quotes, braces and brackets of the array text
#   are the ones inserted, and JSON strings need no escapes. The array has n `{` and n `}`; a list of n objects
#   whose values are all numbers (below) needs n non-nested objects, so object i is exactly line i's text;
# - ` - ` becomes `\t,"` (a tab is JSON whitespace; `_items` splits on the same ` - `, left to right) and any
#   other blank declines, so blanks that `_items` refuses never reach JSON;
# - `np.TYPE(` becomes a tab only where number characters and `)` follow (TYPE: `_NP_WRAPPED`'s list); any
#   other `(` declines; every `)` must close one of those (counted), and becomes a tab. JSON then accepts a value
#   only as `N` or `np.TYPE(N)` with N one JSON number token and nothing else beside it, as `_items` reads it;
# - each `:` becomes `":`; as in `_items_fast`, valid JSON then means exactly one colon per item (so `_items`'
#   `rpartition` splits where JSON does), and the number of keys equals the number of colons only without
#   duplicate keys (`_items` keeps the first position and the last value: declined);
# - `e` before a digit (an exponent without a sign: `1e5`, which `_items` refuses) or any `E` declines;
# - `true`/`false` could only follow a colon directly (tabs come only from separators, numpy heads and `)`), so
#   a colon before `t` or `f` declines: no booleans; `hypot` refuses anything but numbers (`null`) and bounds
#   every value below 2**63, where orjson reads integers as `_items` does (wider ones become floats);
# - an empty key declines (`_items` refuses it).
# The byte-pair checks (`e`+digit, `:`+`t`/`f`) run as numpy comparisons over the whole batch: a regex over the
# batch costs about as much as the JSON decoding. tests/test_metrics_parser.py checks batches against `_items`
# line by line on generated lines.
_BATCH = 64  # lines per orjson.loads (~160 KB of verl text; a whole 1 MiB read as one text was slower)
_MIN_BATCH = 4  # fewer lines (a follower's one line at a time): the per-line path, without numpy's call costs
_NP_BATCH = re.compile(
    rb"np\.(?:float(?:16|32|64|128)?|longdouble|u?int(?:8|16|32|64)?|longlong|intc|intp)\((?=[-0-9.e+]+\))"
)


def _items_batch(rests: list[str]) -> list[dict[str, int | float]] | None:
    """`[_items(r) for r in rests]` from one `orjson.loads`, or None when a line might read differently."""
    flat = "".join(rests)
    if '"' in flat or "\\" in flat or "{" in flat or "}" in flat or "[" in flat or "\t" in flat \
            or "\n" in flat or "\r" in flat or "E" in flat:
        return None
    try:
        body = '},{"'.join(rests).encode()
    except UnicodeEncodeError:  # a lone surrogate (text from feed_lines)
        return None
    body, heads = _NP_BATCH.subn(b"\t", body.replace(b" - ", b'\t,"'))
    if b" " in body or b"(" in body or body.count(b")") != heads:
        return None
    if heads:
        body = body.replace(b")", b"\t")
    import numpy as np  # (on first use: importing launcher.metrics, or a short follow, does not load numpy)

    a = np.frombuffer(body, np.uint8)
    x, y = a[:-1], a[1:]
    # e+digit (uint8 wraps below "0"); ":" + "t"/"f" (`| 18` also maps "d" and "v" there: declining more is safe)
    if (((x == 101) & ((y - 48) < 10)) | ((x == 58) & ((y | 18) == 118))).any():
        return None
    plain = len(body)
    body = body.replace(b":", b'":')
    try:
        batch = orjson.loads(b'[{"' + body + b"}]")
        if len(batch) != len(rests) or sum(map(len, batch)) != len(body) - plain \
                or any(map(dict.__contains__, batch, repeat(""))) \
                or not math.hypot(*chain.from_iterable(map(dict.values, batch))) < _INT64:
            return None
    except (ValueError, TypeError):  # not JSON; not a list of objects; a value that is not a number
        return None
    return batch


def _items_many(rests: list[str]) -> list[dict[str, int | float | bool] | None]:
    """`[_items(r) for r in rests]`, batch by batch where `_items_batch` answers."""
    if len(rests) < _MIN_BATCH:
        return list(map(_items_one, rests))
    out: list[dict[str, int | float | bool] | None] = []
    for i in range(0, len(rests), _BATCH):
        part = rests[i : i + _BATCH]
        got = _items_batch(part)
        out += map(_items_one, part) if got is None else got
    return out


def accelerated() -> bool:
    """True when `LogParser` reads step lines with the compiled `_stepjson` (built by `pip install`)."""
    return _encode is not None


def _apply_patches(pairs: list, patches: list[tuple[int, str, float]]) -> None:
    """Set the values `_stepjson.encode` left as JSON null (nan, inf, ...), each the reference's float().

    With a duplicate key the reference keeps the last value: a patch applies where the key still holds null
    or an earlier patch of the same line, not where a later plain value replaced it."""
    done = set()
    for i, key, value in patches:
        m = pairs[i][1]
        if m[key] is None or (i, key) in done:
            m[key] = value
            done.add((i, key))


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
        if not chunk:
            return []
        if type(chunk) is not bytes:  # bytearray, memoryview: fragments are split and decoded as bytes
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

    def finish(self) -> list[str]:
        """End of stream: return the unterminated last fragment, if any (many logs lack a final newline)."""
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

    def _split(self, data: bytes, drop_first: bool) -> list[str]:
        """`data` ends with a terminator. Split as bytes, then decode fragment by fragment.

        (Decoding the whole block first would make it one wide string as soon as it holds one non-ASCII
        character, a tqdm bar's, and every later step would handle twice the bytes.)"""
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
                return list(map(bytes.decode, parts))  # (UTF-8, strict)
            except UnicodeDecodeError:
                pass
        out: list[str] = []
        for p in parts:
            if len(p) > limit:
                c.truncated += 1
                continue
            try:
                out.append(p.decode("utf-8"))
            except UnicodeDecodeError:
                c.non_utf8 += 1
        return out


@dataclass
class LogParser:
    """Splitter + `parse_line` with counters: `feed(bytes) -> [StepRecord]`, constant memory.

    One `LogParser` per byte stream (per pod container attach): partial lines are per stream.
    """

    max_line_bytes: int = MAX_LINE_BYTES
    counters: ParseCounters = field(default_factory=ParseCounters)
    compiled: bool = True  # False: the pure-Python path even where the C accelerator is built (tests compare them)

    def __post_init__(self) -> None:
        self._splitter = LineSplitter(self.max_line_bytes, self.counters)

    def feed(self, chunk: bytes) -> list[StepRecord]:
        """Parse every fragment completed by `chunk`."""
        return self._records(self._splitter.feed(chunk))

    def finish(self) -> list[StepRecord]:
        """End of stream: parse the unterminated last fragment, if any."""
        return self._records(self._splitter.finish())

    def reset(self) -> None:
        """The stream broke: drop a partial line (counted as truncated) before re-attaching."""
        self._splitter.reset()

    def feed_lines(self, lines) -> list[StepRecord]:
        """Parse already-split text lines (e.g. from a client that yields `str` lines).

        Each line may still contain `\\r` fragments; they are split here.
        """
        frags: list[str] = []
        for line in lines:
            for f in line.replace("\r", "\n").split("\n"):
                if f:
                    self.counters.lines += 1
                    if len(f) > self.max_line_bytes:
                        self.counters.truncated += 1
                    else:
                        frags.append(f)
        return self._records(frags)

    def _records(self, frags: list[str]) -> list[StepRecord]:
        if _encode is None or not self.compiled:
            return self._records_py(frags)
        # The C accelerator's path: the step lines are found, their prefixes removed and their texts handed to
        # `_stepjson.encode` with whole-list operations, so no Python code runs per line unless a line has an
        # unremembered prefix, was declined, or holds a nan/inf. Same records and counts as `_records_py`.
        steps = list(compress(frags, map(str.__contains__, frags, repeat(_STEP))))
        noise = len(frags) - len(steps)
        parts = list(map(str.partition, steps, repeat(_STEP)))
        if set(map(itemgetter(0), parts)) <= _PREFIX_OK:
            rests = list(map(itemgetter(2), parts))
        else:
            rests = []
            for f in map("".join, parts):
                f = _from_step(f, f.index(_STEP))
                if f is None:
                    noise += 1
                else:
                    rests.append(f[5:])
        body, declined, patches = _encode(rests)
        pairs = orjson.loads(body)  # (JSON by construction; the property tests and the fuzz target hold it to that)
        if patches:
            _apply_patches(pairs, patches)
        malformed = 0
        for i in declined:  # the reference reading, line by line
            rec = _parse(_STEP + rests[i])
            if rec is None:
                noise += 1
            elif rec is _MALFORMED:
                malformed += 1
            else:
                pairs[i] = (rec.step, rec.metrics)
        out = list(starmap(StepRecord, filter(None, pairs) if declined else pairs))
        c = self.counters
        c.noise += noise
        c.malformed += malformed
        c.records += len(out)
        return out

    def _records_py(self, frags: list[str]) -> list[StepRecord]:
        # Step lines are collected first and their items read together (`_items_many`): one orjson call per
        # batch of lines instead of the per-line string work. Same results as `_parse` line by line.
        c = self.counters
        noise = malformed = 0
        steps: list[int] = []
        rests: list[str | None] = []  # None: "step:N" without items
        for f in frags:
            at = f.find(_STEP)
            if at < 0:  # fast path: config dump, tqdm, warnings
                noise += 1
                continue
            if at:
                f = _from_step(f, at)
                if f is None:
                    noise += 1
                    continue
            cut = f.find(_SEP)  # (where `_parse`'s partition splits)
            num = f[5:cut] if cut >= 0 else f[5:]
            if not num.isdigit() or not num.isascii():
                if num[:1].isdigit():  # "step:12abc"
                    malformed += 1
                else:
                    noise += 1
                continue
            steps.append(int(num))
            rests.append(f[cut + 3 :] if cut >= 0 else None)
        out: list[StepRecord] = []
        if steps:
            if None in rests:
                metrics = [{} if r is None else _items_one(r) for r in rests]
            else:
                metrics = _items_many(rests)
            if None in metrics:
                for step, m in zip(steps, metrics):
                    if m is None:
                        malformed += 1
                    else:
                        out.append(StepRecord(step, m))
            else:
                out = list(map(StepRecord, steps, metrics))
        c.noise += noise
        c.malformed += malformed
        c.records += len(out)
        return out
