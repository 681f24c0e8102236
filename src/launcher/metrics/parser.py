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

Speed: `_parse` (with `_items`, one item at a time) is the reference reading of a fragment. `LogParser` and
`parse_line` read through `_parse_fast`, which gives the same result for every fragment: it remembers which Ray
prefixes are whole prefixes, and `_items_fast` rewrites a line's items as one JSON object for one `orjson.loads`,
answering only where that provably reads as `_items` does (else `_items` reads the line). `LineSplitter` finds
line ends with one memchr per line. Python and orjson only: no numpy, no extension module of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from io import BytesIO
from math import hypot
from operator import itemgetter

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

_NO_NEWLINE = itemgetter(slice(None, -1))
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


# Ray prefixes (`\x1b[36m(TaskRunnerV1 pid=6402)\x1b[0m `) repeat on every line of an actor: `_parse_fast` matches
# each distinct text before the first `step:` once. The prefix patterns cannot match across `step:` (`_prefix_only`),
# so `_strip_prefixes(line)` removes exactly that text whenever it removes it from `head + "step:"`. Timestamped
# heads (a digit first) differ on every line and are not kept.
_PREFIX_SEEN: dict[str, bool] = {}


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
    return known


def _parse(line: str):
    """StepRecord, None (noise) or _MALFORMED: the reference reading of one fragment (`_parse_fast` is the fast one)."""
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
    metrics = _items(rest)
    return _MALFORMED if metrics is None else StepRecord(int(num), metrics)


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
# (`k1:v1 - k2:v2` -> `{"k1":v1\t,"k2":v2}`), several times faster than `_items` on verl's lines. It answers only
# when the result is provably what `_items` gives, else None (and `_items` decides). Why that holds:
# - no `"`, `\`, tab, CR or LF in the text and no blank outside a separator: the only quotes are the inserted
#   ones, keys need no escaping, and the only JSON whitespace is the tab that each separator becomes (` - ` ->
#   `\t,"`, found left to right, where `_items`' split finds them);
# - each `:` becomes `":`. A JSON string cannot hold a tab, so none runs across a separator: every string ends at
#   a colon's quote, which a `:` follows, so no value is a string, and each key opens at `{"`, at a separator's
#   quote or (after a comma of the text) at a colon's quote. Only in that last case, or with a duplicate key, has
#   the dict fewer keys than the text has colons (counted from the length the replace adds). When they are equal,
#   each item holds exactly one colon, its key is the text before it (as `rpartition` gives) and its value the
#   text after it, and no value was overwritten by a duplicate key, so every value is checked below;
# - each value is one JSON value: `hypot` refuses null, arrays and objects (TypeError) and bounds every number
#   below 2**62, where orjson reads integers as `_items` does (a wider one becomes a float); `e` before a digit
#   (an exponent without a sign, which `_items` refuses), a tab or the closing brace (the end of `true`, `false`)
#   declines, as does any `E`: what is left is a JSON number that `_items` reads to the same int or float;
# - a numpy repr is unwrapped only where it is the whole value and its inner text a number both read alike;
# - an empty key goes to `_items` (which refuses it).
# tests/metrics/test_metrics_parser.py checks the two against each other on generated lines.
_NP_HEAD = re.compile(
    rb"(?:float(?:16|32|64|128)?|longdouble|u?int(?:8|16|32|64)?|longlong|intc|intp)"
    rb"\('?(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:e[+-][0-9]+)?)'?\)"
)
_NP_SEEN: dict[bytes, bytes] = {}  # `int32(2` -> `2`: numpy reprs already matched by _NP_HEAD (bounded)
_BAD_E = re.compile(rb"e[0-9\t}]")  # `e` before a digit, or ending a value (`true`, `false`): see above
_BOUND = 2.0**62  # orjson reads an integer below -2**63 or from 2**64 as a float; `_items` keeps it an int


def _items_fast(rest: str) -> dict[str, int | float] | None:
    """`_items(rest)` built by orjson for a line of plain keys and numbers; None when `_items` must decide."""
    # (each check below is one of the conditions in the comment above)
    if '"' in rest or "\\" in rest or "E" in rest or "\t" in rest or "\n" in rest or "\r" in rest:
        return None
    try:
        body = rest.encode()  # (bytes: replacing a character is a memchr per occurrence, not a loop per byte)
    except UnicodeEncodeError:  # a lone surrogate (text from feed_lines)
        return None
    body = body.replace(b" - ", b'\t,"')  # (same length: one pass, nothing to count)
    if b" " in body:
        return None
    colons = len(body)
    body = body.replace(b":", b'":')
    colons = len(body) - colons
    if b"(" in body:  # a numpy repr, maybe (one memchr, where looking for `":np.` costs a scan)
        body = _unwrap_np(body)
        if body is None:
            return None
    body = b'{"' + body + b"}"
    if _BAD_E.search(body):
        return None
    try:
        metrics = orjson.loads(body)
        if len(metrics) != colons or not hypot(*metrics.values()) < _BOUND:  # (TypeError: null, array, object)
            return None
    except (ValueError, TypeError):  # not JSON (orjson.JSONDecodeError is a ValueError), or not a number
        return None
    return None if "" in metrics else metrics


def _unwrap_np(body: bytes) -> bytes | None:
    """`":np.int32(2)` -> `":2` for every numpy repr in `body`; None if one is not a plain number inside.

    A run repeats a few reprs (`np.int32(2)` on every line), so each distinct one is matched once."""
    parts = body.split(b'":np.')
    for i in range(1, len(parts)):
        head, paren, tail = parts[i].partition(b")")
        if not paren or (tail and tail[:3] != b'\t,"'):
            return None  # no closing parenthesis, or text after it inside the same value
        inner = _NP_SEEN.get(head)  # (the memo is keyed by what precedes a closing parenthesis only)
        if inner is None:
            m = _NP_HEAD.fullmatch(head + b")")
            if m is None:
                return None
            inner = m.group(1)
            if len(_NP_SEEN) < 4096:
                _NP_SEEN[head] = inner
        parts[i] = inner + tail
    return b'":'.join(parts)


def _parse_fast(f: str):
    """`_parse(f)`, faster, for a fragment that holds `step:`: the prefix decision remembered, the items read by
    `_items_fast` where it answers."""
    at = f.find(_STEP)
    if at and not _remember_prefix(f[:at]):  # not all prefix before it: what `_strip_prefixes` leaves, or noise
        f = _strip_prefixes(f)
        if not f.startswith(_STEP):
            return None  # a sentence that mentions `step:`
        at = 0
    cut = f.find(_SEP, at)  # (where `_parse`'s partition splits)
    num = f[at + 5 : cut] if cut >= 0 else f[at + 5 :]
    if not num.isdigit() or not num.isascii():
        return _MALFORMED if num[:1].isdigit() else None
    if cut < 0:
        return StepRecord(int(num), {})
    rest = f[cut + 3 :]
    metrics = _items_fast(rest)
    if metrics is None:
        metrics = _items(rest)
        if metrics is None:
            return _MALFORMED
    return StepRecord(int(num), metrics)


def parse_line(line: str) -> StepRecord | None:
    """Parse one fragment (no `\\r`/`\\n` inside); None for noise and for malformed metric lines.

    Accepts the grammar in the module docstring. Use `LogParser` to also count what was skipped.
    """
    if _STEP not in line:
        return None
    rec = _parse_fast(line)
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
        if b"\r" in data:
            data = data.replace(b"\r", b"\n")
        # (`readlines` finds each line with one memchr; `split` would test every byte in a loop of its own)
        parts = BytesIO(data).readlines()  # each ends with its b"\n": `data` ends with a terminator
        if drop_first and parts:
            parts.pop(0)  # tail of an over-long line, already counted as truncated
        parts = list(map(_NO_NEWLINE, filter(b"\n".__ne__, parts)))  # empty fragments dropped
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
        # `_parse` line by line, by way of `_parse_fast`: the same records and counts.
        c = self.counters
        noise = malformed = 0
        out: list[StepRecord] = []
        for f in frags:
            if _STEP not in f:  # fast path: config dump, tqdm, warnings
                noise += 1
                continue
            rec = _parse_fast(f)
            if rec is None:
                noise += 1
            elif rec is _MALFORMED:
                malformed += 1
            else:
                out.append(rec)
        c.noise += noise
        c.malformed += malformed
        c.records += len(out)
        return out
