"""Parser: verl console-line grammar, prefixes, value types, splitting, bounded bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.metrics import LineSplitter, LogParser, ParseCounters, StepRecord, parse_line, parse_value

ESC = "\x1b"
# verl.md §5.2, verbatim
FULL = (
    "step:1 - training/global_step:1 - training/epoch:0 - actor/entropy:0.3912 - actor/pg_loss:np.float64(-0.0123)"
    " - actor/grad_norm:np.float64(0.8731) - actor/lr:1e-06 - critic/score/mean:0.625 - critic/score/max:1.0"
    " - critic/score/min:0.0 - response_length/mean:187.25 - response_length/clip_ratio:0.0625"
    " - response_length_non_aborted/mean:nan - timing_s/step:21.402 - perf/total_num_tokens:3712"
    " - perf/throughput:86.72 - num_turns/min:np.int32(2) - training/num_turns/mean:np.float64(2.0)"
    " - training/off_policy/trajectory_spans/max:np.int64(1) - val-core/openai/gsm8k/acc/mean@1:np.float64(0.71)"
    " - some/bool:True"
)


def test_full_line_from_notes_keys_order_and_types():
    rec = parse_line(FULL)
    assert rec.step == 1
    m = rec.metrics
    assert list(m)[:3] == ["training/global_step", "training/epoch", "actor/entropy"]
    assert len(m) == FULL.count(" - ")
    assert m["training/global_step"] == 1 and type(m["training/global_step"]) is int
    assert m["actor/pg_loss"] == -0.0123 and type(m["actor/pg_loss"]) is float
    assert m["actor/lr"] == 1e-06
    assert math.isnan(m["response_length_non_aborted/mean"])
    assert m["perf/total_num_tokens"] == 3712 and type(m["perf/total_num_tokens"]) is int
    assert m["num_turns/min"] == 2 and type(m["num_turns/min"]) is int
    assert m["training/num_turns/mean"] == 2.0 and type(m["training/num_turns/mean"]) is float
    assert m["val-core/openai/gsm8k/acc/mean@1"] == 0.71
    assert m["some/bool"] is True


SHORT = "step:7 - a/b:0.5 - c:np.int64(3)"


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        f"{ESC}[36m(TaskRunnerV1 pid=11605){ESC}[0m ",
        f"{ESC}[36m(TaskRunner pid=11660){ESC}[0m ",
        "(TaskRunnerV1 pid=11992) ",
        "(TaskRunner pid=1) ",
        f"{ESC}[36m(TaskRunnerV1 pid=77, ip=10.244.1.5){ESC}[0m ",
        "(TaskRunnerV1 pid=77, ip=10.244.1.5) ",
        "2026-01-01T00:00:00.123456789Z ",  # kubectl logs --timestamps
        "2026-01-01T00:00:00.123456789Z stdout F ",  # CRI log file
        f"2026-01-01T00:00:00Z stderr F {ESC}[36m(TaskRunnerV1 pid=5){ESC}[0m ",
        "2026-01-01T00:00:00+02:00 (TaskRunnerV1 pid=5) ",
    ],
)
def test_prefixes(prefix):
    assert parse_line(prefix + SHORT) == StepRecord(7, {"a/b": 0.5, "c": 3})


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0", 0), ("-3", -3), ("100000000000000000000", 10**20), ("0.625", 0.625), ("-0.0123", -0.0123),
        ("1e-06", 1e-06), ("1e+20", 1e20), ("-1.5e-07", -1.5e-07), ("1.0", 1.0), ("-0.0", -0.0),
        ("inf", math.inf), ("-inf", -math.inf), ("True", True), ("False", False),
        ("np.float64(-0.0123)", -0.0123), ("np.float64(1e-06)", 1e-06), ("np.float64(-inf)", -math.inf),
        ("np.float32(0.1)", 0.1), ("np.int32(2)", 2), ("np.int64(-1)", -1), ("np.uint8(3)", 3),
        ("np.True_", True), ("np.False_", False), ("np.longdouble('0.5')", 0.5), ("np.float16(0.5)", 0.5),
    ],
)
def test_values(text, expected):
    v = parse_value(text)
    assert v == expected and type(v) is type(expected)
    rec = parse_line(f"step:3 - k:{text}")
    assert rec.metrics["k"] == expected and type(rec.metrics["k"]) is type(expected)


@pytest.mark.parametrize("text", ["nan", "np.float64(nan)", "np.float32(nan)"])
def test_nan_values(text):
    assert math.isnan(parse_line(f"step:3 - k:{text}").metrics["k"])


@pytest.mark.parametrize(
    "text", ["", "126.", "1_0.5", " 1.5", "infinity", "np.float64(", "np.float64(0.5", "np.foo(1)", "abc", "(1+2j)", "0x10"]
)
def test_bad_values_make_line_malformed(text):
    assert parse_value(text) is None
    p = LogParser()
    assert p.feed(f"step:3 - a:1.0 - k:{text}\n".encode()) == []
    assert p.counters.malformed == 1


def test_step_zero_validation_line():
    line = (
        "step:0 - val-aux/openai/gsm8k/reward/mean@1:np.float64(0.75) - val-core/openai/gsm8k/acc/mean@1:np.float64(0.75)"
        " - val-aux/num_turns/min:np.int64(1) - val-aux/num_turns/max:np.int64(1) - val-aux/num_turns/mean:np.float64(1.0)"
    )
    rec = parse_line(line)
    assert rec.step == 0
    assert rec.metrics == {
        "val-aux/openai/gsm8k/reward/mean@1": 0.75, "val-core/openai/gsm8k/acc/mean@1": 0.75,
        "val-aux/num_turns/min": 1, "val-aux/num_turns/max": 1, "val-aux/num_turns/mean": 1.0,
    }


def test_step_without_metrics():
    assert parse_line("step:4") == StepRecord(4, {})


def test_key_with_colon_splits_on_last_colon():
    assert parse_line("step:1 - weird:key:0.5").metrics == {"weird:key": 0.5}


@pytest.mark.parametrize(
    "line",
    [
        "Training Progress:   4%|▍         | 1/25 [00:21<08:36, 21.5s/it]",
        "'Final validation metrics: None'",
        "(TaskRunnerV1 pid=3) {'trainer': {'total_training_steps': 25, 'save_freq': -1}}",
        "2026-11-29 16:46:52,592\tINFO worker.py:2038 -- Started a local Ray instance.",
        "we are at step: 3 now",
        "(TaskRunnerV1 pid=3) the next step:4 will be slow",
        "",
    ],
)
def test_noise(line):
    assert parse_line(line) is None


@pytest.mark.parametrize(
    "line",
    ["step:3 - a:0.5 - b", "step:3 - a:0.5 - :1.0", "step:3 - a:0.5 - b:np.float64(0.", "step:12x - a:1", "step:3 - a:0.5 -"],
)
def test_malformed_is_counted_not_returned(line):
    p = LogParser()
    assert p.feed(line.encode() + b"\n") == []
    assert (p.counters.malformed, p.counters.records) == (1, 0)
    assert parse_line(line) is None


def test_tqdm_carriage_returns_split_into_fragments():
    data = (
        f"{ESC}[36m(TaskRunnerV1 pid=9){ESC}[0m Training Progress:   0%|          | 0/2 [00:00<?, ?it/s]"
        "\rTraining Progress:  50%|█████     | 1/2 [00:21<00:21, 21.0s/it]\rstep:1 - a:1.0\r\n"
        "step:2 - a:2.0\r\n"
    ).encode()
    p = LogParser()
    recs = p.feed(data)
    assert [(r.step, r.metrics) for r in recs] == [(1, {"a": 1.0}), (2, {"a": 2.0})]
    assert p.counters.lines == 4 and p.counters.noise == 2 and p.counters.records == 2


def test_splitter_partial_lines_across_chunks_any_chunking():
    data = ("noise ü line\nstep:1 - a:0.5\r\nstep:2 - b:np.int32(2)\rtail without newline").encode()
    for size in (1, 2, 3, 7, 64):
        s = LineSplitter()
        out = []
        for i in range(0, len(data), size):
            out += s.feed(data[i : i + size])
        assert out == ["noise ü line", "step:1 - a:0.5", "step:2 - b:np.int32(2)"], size
        assert s.finish() == ["tail without newline"]
        assert s.counters.lines == 4


def test_multibyte_char_split_across_chunks():
    data = "step:1 - ü/x:1.0\n".encode()
    cut = data.index("ü".encode()) + 1  # in the middle of the two-byte character
    p = LogParser()
    assert p.feed(data[:cut]) == []
    assert p.feed(data[cut:]) == [StepRecord(1, {"ü/x": 1.0})]
    assert p.counters.non_utf8 == 0


def test_non_utf8_line_is_counted_and_skipped_others_kept():
    p = LogParser()
    recs = p.feed(b"step:1 - a:1.0\nstep:2 - a:\xff\xfe2.0\n\xc3(garbage\nstep:3 - a:3.0\n")
    assert [r.step for r in recs] == [1, 3]
    assert p.counters.non_utf8 == 2 and p.counters.lines == 4


def test_overlong_line_is_capped_counted_and_the_next_line_survives():
    p = LogParser(max_line_bytes=100)
    recs = p.feed(b"step:1 - a:" + b"9" * 500)  # no newline yet: must not be kept
    assert recs == [] and len(p._splitter._pending) == 0
    recs += p.feed(b"9" * 10_000)
    recs += p.feed(b"\nstep:2 - a:2.0\n")
    assert [r.step for r in recs] == [2]
    assert p.counters.truncated == 1 and p.counters.lines == 2


def test_overlong_complete_line_within_one_chunk():
    p = LogParser(max_line_bytes=50)
    recs = p.feed(b"step:1 - a:" + b"1" * 100 + b"\nstep:2 - a:2.0\n")
    assert [r.step for r in recs] == [2] and p.counters.truncated == 1


def test_reset_drops_partial_line_as_truncated():
    p = LogParser()
    assert p.feed(b"step:1 - a:1.0\nstep:2 - a:2") == [StepRecord(1, {"a": 1.0})]
    p.reset()
    # re-attach resends the whole line; without reset it would be glued onto the partial one
    assert p.feed(b"step:2 - a:2.5\n") == [StepRecord(2, {"a": 2.5})]
    assert p.counters.truncated == 1


def test_feed_lines_for_text_clients():
    p = LogParser()
    recs = p.feed_lines(["noise", "x\rstep:5 - a:np.float64(0.5)", "step:6 - a:1"])
    assert [(r.step, r.metrics) for r in recs] == [(5, {"a": 0.5}), (6, {"a": 1})]
    assert p.counters.lines == 4


def test_counters_add():
    a, b = ParseCounters(lines=2, records=1), ParseCounters(lines=3, truncated=1)
    a.add(b)
    assert a.as_dict() == {"lines": 5, "records": 1, "noise": 0, "malformed": 0, "non_utf8": 0, "truncated": 1}


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    rec = parse_line(text)
    assert rec is None or isinstance(rec, StepRecord)
    LogParser().feed_lines([text])


@settings(max_examples=300, deadline=None)
@given(st.binary(), st.lists(st.integers(1, 50), max_size=5))
def test_arbitrary_bytes_never_raise_and_chunking_does_not_matter(data, sizes):
    whole = LogParser(max_line_bytes=64)
    expected = whole.feed(data) + whole.finish()
    chunked = LogParser(max_line_bytes=64)
    got, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)] if sizes else len(data)
        got += chunked.feed(data[i : i + n])
        i, k = i + n, k + 1
    got += chunked.finish()
    assert got == expected
    assert chunked.counters == whole.counters


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("step:0123456789 -.()np\rx\n\x1b[m"), max_size=80))
def test_metric_like_garbage_never_raises(text):
    p = LogParser()
    p.feed(text.encode())
    p.finish()
    c = p.counters
    assert c.lines == c.records + c.noise + c.malformed + c.non_utf8 + c.truncated


# The orjson fast path (`_items_fast`) must give exactly what the per-item reference (`_items`) gives, or
# decline (None). Generated lines mix verl-like keys with values of every kind the grammar names and
# near-misses of each (blanks, upper-case or unsigned exponents, wide integers, bad numpy reprs, quotes).
_VALUE_TEXTS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["1e-06", "1e5", "1E-06", "1.5E5", "1.5e5", "-0", "-0.0", "007", "+1.5", ".5", "1.", "nan",
                     "inf", "True", "np.True_", "np.int32(2)", "np.int32(02)", "np.float64('1.5')",
                     "np.float64(nan)", "np.foo(2)", "np.int64(1", " 1.5", "1.5 ", "\t2", "1,2", "[1]", "{}",
                     "true", "null", '"1"', "1\\", "", "1e+400", "٣", "1_0.5"]),
    # where the reference reads differently inside and outside a numpy repr, and what JSON cannot carry
    st.sampled_from(["np.float64(1.5e5)", "np.float64(1.5e+05)", "np.float64(1.5E+05)", "1.5e+05", "-nan",
                     "np.float64(-inf)", "1e+308", "1.7976931348623159e+308", "9" * 25 + ".5", "18446744073709551616",
                     "9223372036854775808", "-9223372036854775809", "0.1234567890123456789012345",
                     "0." + "0" * 30 + "1e+330", "1e-400", "np.int64(007)", "000", "np.float64(-0.0)", "np.False_",
                     "False", "np.float(2)", "np.uint(3)", "np.int(4)", "np.float64(1)x", "np.float64 (1)", "np.(1)",
                     "é", "1.5\x00", "true,", "[]", "{}", "1}", "[1,2]", "1e5,"]),
    st.text(alphabet=st.sampled_from("0123456789.-+eE:np()' \t,"), max_size=12),
)
_KEYS = st.one_of(st.sampled_from(["actor/lr", "a", "critic/score/mean", "val-core/x/acc/mean@1", "a:b", "k ",
                                   "", "dup", "x\x00", "é/ü", 'q"', "s\\", "k\x01", "a - b", "\x7f", "日本", ",",
                                   "}", "{", ":", "e1", "true", "a\t", "np.int32(1)"]),
                  st.text(alphabet=st.sampled_from("abc/_:-@ e1,"), min_size=0, max_size=8))


def _typed(metrics) -> list:
    """Items with each value's type and repr: nan equals nan, and 1, 1.0, True and -0.0, 0.0 differ."""
    return [(k, type(v), repr(v)) for k, v in metrics.items()]


# (a loaded CI box generates these slowly: that is no failure of the parser)
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_KEYS, _VALUE_TEXTS), min_size=1, max_size=8))
def test_fast_items_agree_with_the_reference(pairs):
    from launcher.metrics.parser import _items, _items_fast

    rest = " - ".join(f"{k}:{v}" for k, v in pairs)
    fast = _items_fast(rest)
    if fast is not None:
        slow = _items(rest)
        assert slow is not None, rest
        assert _typed(fast) == _typed(slow), rest


@pytest.mark.parametrize(
    "bad",
    [
        "a:1e5", "a:1.5e5", "a:np.float64(1e5)",  # exponent without a sign: `_items` refuses it, JSON reads 100000.0
        "a:true", "a:false", "a:null", "a:True", "a:true - b:1", "b:1 - a:false",  # JSON literals; `True` is `_items`'
        "a:np.int32(1 - b:2)",  # the repr's ")" is after the next item
        "a:1)", "a:np.int32(1", "a:np.int32(1)5", "a:5np.int32(1)", "a:np.int32(1)np.int32(2)",
        "a:np.int32()", "a:np.int32(1)2", "a:np.foo(1)", "a:np.float64('0.5')", "a:np.True_",
        "a:18446744073709551616", "a:-9223372036854775809", "a:9223372036854775808",  # orjson: floats / bounds
        "a:1 - a:2", "a:2 - b:1 - a:1",  # duplicate keys: first position, last value
        "a:[1] - a:2", "a:null - a:1", "a:true - a:1", "a:{} - a:1", "a:1e5 - a:1",  # a bad value overwritten
        ":1", "a:1 - :2",  # empty key
        "a:true,:x:1", "a:1,:x:2", "a:1,:2",  # a comma of the text opening a key at a colon
        "a: 1", "a:1  - b:2", "a:1 - - b:2", "a:1\t", " - a:1", "a:1 - ", "a:1 -",  # blanks and bare separators
        "a:1 - b",  # item without a colon
        "a:b:1", "a::1", "a::1 - b:2",  # more than one colon: `_items` splits on the last one
        "a:1}, {b:2", "a:[1]", 'a:"1"', "a:1\\", "a:[]", "a:{}", "a:1}", "{a:1",  # JSON structure in the text
        "a:1E5", "a:01", "a:+1", "a:.5", "a:1.", "a:nan", "a:inf", "a:-inf", "a:1_0.5", "", "a:-0", "a:-0.0",
        "e1:1 - e:2", "a\x00:1", "ü:1.5", "a\ud800:1.0",
    ],
)
def test_fast_items_decline_or_agree_on_near_misses(bad):
    """Alone and among plain items: `_items_fast` declines, or gives exactly what `_items` gives."""
    from launcher.metrics.parser import _items, _items_fast

    for rest in (bad, "x:0.5 - " + bad, bad + " - y:np.int64(3)", "x:0.5 - " + bad + " - y:np.int64(3)"):
        fast = _items_fast(rest)
        if fast is not None:
            slow = _items(rest)
            assert slow is not None and _typed(fast) == _typed(slow), rest


def test_fast_items_answer_for_plain_items_and_decline_for_bad_ones():
    """Guards against a fast path that declines everything (or nothing)."""
    from launcher.metrics.parser import _items_fast

    assert _typed(_items_fast("a:1 - b:-0.5 - c:np.int32(2) - d:np.float64(1e-06) - e:1e+15 - f:-0.0")) == _typed(
        {"a": 1, "b": -0.5, "c": 2, "d": 1e-06, "e": 1e15, "f": -0.0})
    assert _items_fast("a:2 - b:1 - a:1") is None  # a duplicate key
    for bad in ("a:1e5", "a:true", "a:[1] - a:2", "a:true,:x:1", "a:9223372036854775808", "a:nan"):
        assert _items_fast(bad) is None, bad


def test_fast_items_do_not_let_a_memoised_repr_excuse_a_torn_one():
    """A repr seen whole (`np.int64(1)`) is memoised; the same text torn before its `)` is still malformed."""
    from launcher.metrics.parser import _items_fast

    assert _items_fast("a:np.int64(1) - b:0.5") == {"a": 1, "b": 0.5}
    assert _items_fast("a:np.int64(1") is None and parse_line("step:1 - a:np.int64(1") is None
    assert _items_fast("a:np.int64(1 - b:0.5)") is None and parse_line("step:1 - a:np.int64(1 - b:0.5)") is None


def test_fast_items_take_verl_lines():
    """The fast path is taken for real verl lines (numpy reprs included), so the speed-up is real."""
    import simlog
    from launcher.metrics.parser import _items, _items_fast

    taken = 0
    for line in simlog.generate(steps=30, seed=3, val_before_train=True):
        if "step:" not in line:
            continue
        rest = line[line.index("step:"):].rstrip("\n").partition(" - ")[2]
        fast = _items_fast(rest)
        if fast is not None:
            taken += 1
            assert list(fast.items()) == list(_items(rest).items())
    assert taken >= 30


def _simlog_bytes(**kw) -> bytes:
    import simlog

    return "".join(simlog.generate(steps=40, seed=5, val_before_train=True, **kw)).encode()


def _reference(frags) -> tuple[list[StepRecord], ParseCounters]:
    """`_parse` (the reference, `_items` item by item) fragment by fragment: its records and the counts it implies."""
    from launcher.metrics.parser import _MALFORMED, _parse

    recs, c = [], ParseCounters()
    for f in frags:
        c.lines += 1
        rec = _parse(f)
        if rec is None:
            c.noise += 1
        elif rec is _MALFORMED:
            c.malformed += 1
        else:
            recs.append(rec)
    c.records = len(recs)
    return recs, c


def _fragments(data: bytes) -> list[str]:
    """The fragments of a UTF-8 log, split on \\r, \\n, \\r\\n as `LineSplitter` splits it (empty ones dropped)."""
    return [f for f in data.decode().replace("\r", "\n").split("\n") if f]


def _reference_records(data: bytes) -> list[StepRecord]:
    return _reference(_fragments(data))[0]


def _reference_feed(data: bytes) -> tuple[list[StepRecord], ParseCounters]:
    """What `LogParser().feed(data) + finish()` must give: the bytes split on \\r and \\n, each piece decoded on its
    own (invalid UTF-8 counted and skipped), then `_parse` piece by piece."""
    pieces = [b for b in data.replace(b"\r", b"\n").split(b"\n") if b]
    texts = []
    for b in pieces:
        try:
            texts.append(b.decode())
        except UnicodeDecodeError:
            pass
    recs, c = _reference(texts)
    c.lines, c.non_utf8 = len(pieces), len(pieces) - len(texts)
    return recs, c


def _same(got, want) -> bool:
    """Record lists equal with nan equal to nan and ints, floats and bools told apart (repr does both)."""
    return [(r.step, _typed(r.metrics)) for r in got] == [(r.step, _typed(r.metrics)) for r in want]


@pytest.mark.parametrize("kw", [{}, {"cri": True}, {"color": False}])
def test_log_parser_gives_the_reference_records(kw):
    """A whole simlog log (Ray colours, CRI timestamps, tqdm \\r) in one feed: the records and counts are the
    reference's (`_parse`, fragment by fragment), value types included."""
    data = _simlog_bytes(**kw)
    p = LogParser()
    got = p.feed(data) + p.finish()
    want, counts = _reference(_fragments(data))
    assert len(want) > 40 and got == want and _same(got, want)
    assert p.counters == counts and counts.malformed == 0


@pytest.mark.parametrize("size", [1, 7, 1000, 2600, 4096, 65536, 1 << 20])
def test_chunking_never_loses_or_duplicates_step_lines(size):
    """Step lines split across chunks at every kind of place (mid-line, mid-number, at \\r of \\r\\n)."""
    data = _simlog_bytes(cri=True).replace(b"\n", b"\r\n")  # CRLF too
    whole = LogParser()
    want = whole.feed(data) + whole.finish()
    p = LogParser()
    got = []
    for i in range(0, len(data), size):
        got += p.feed(data[i : i + size])
    got += p.finish()
    assert got == want == _reference_records(data)
    assert p.counters == whole.counters == _reference_feed(data)[1]


def test_a_step_line_cut_at_every_offset_across_two_feeds():
    data = _simlog_bytes()
    line_at = data.index(b"step:3 ")
    line_at = data.rindex(b"\n", 0, line_at) + 1
    end = data.index(b"\n", line_at) + 1
    want = _reference_records(data)
    for cut in range(line_at, end + 1, 97):
        p = LogParser()
        assert p.feed(data[:cut]) + p.feed(data[cut:]) + p.finish() == want, cut


def test_over_long_line_among_step_lines_is_capped_and_its_neighbours_parsed():
    lines = [f"step:{i} - a:{i}.5 - b:np.int64({i})\n".encode() for i in range(20)]
    long = b"step:99 - a:" + b"1" * 5000 + b"\n"
    data = b"".join(lines[:10]) + long + b"".join(lines[10:])
    for size in (len(data), 333, 64):
        p = LogParser(max_line_bytes=1000)
        got = []
        for i in range(0, len(data), size):
            got += p.feed(data[i : i + size])
        got += p.finish()
        assert [r.step for r in got] == list(range(20)), size
        assert got[3].metrics == {"a": 3.5, "b": 3}
        assert p.counters.truncated == 1 and p.counters.records == 20
        assert len(p._splitter._pending) <= 1000


def test_one_bad_line_in_a_feed_is_counted_and_the_rest_kept():
    lines = [f"step:{i} - a:{i}.5 - b:np.int64({i})" for i in range(30)]
    lines[7] = "step:7 - a:np.int64(1 - b:2)"  # torn repr: malformed
    lines[12] = "step:12 - a:1e5"  # `_items` refuses it
    lines[20] = "step:20"  # no items
    p = LogParser()
    got = p.feed(("\n".join(lines) + "\n").encode())
    assert [r.step for r in got] == [i for i in range(30) if i not in (7, 12)]
    assert got[[r.step for r in got].index(20)].metrics == {}
    assert p.counters.malformed == 2 and p.counters.records == 28


def test_feed_accepts_bytearray_and_memoryview():
    data = b"step:1 - a:0.5\nstep:2 - a:1.5\n"
    for chunk in (bytearray(data), memoryview(data)):
        p = LogParser()
        assert [r.step for r in p.feed(chunk)] == [1, 2]


def test_feed_lines_reads_like_feed():
    data = _simlog_bytes(cri=True)
    p = LogParser()
    text_lines = data.decode().split("\n")
    assert p.feed_lines(text_lines) == _reference_records(data)
    assert p.counters == _reference_feed(data)[1]
    odd = ["step:1 - a\ud800:1.0", "step:2 - a:1.0"] * 3  # a lone surrogate cannot be UTF-8: read line by line
    assert LogParser().feed_lines(odd) == [parse_line(x) for x in odd] == [StepRecord(1, {"a\ud800": 1.0}),
                                                                          StepRecord(2, {"a": 1.0})] * 3


_PREFIX_PIECES = st.sampled_from([f"{ESC}[36m", f"{ESC}[0m", "(", ")", "(TaskRunnerV1 pid=6402)", "pid=", "7", " ",
                                  ", ip=10.0.0.1", "step:", "step:3", "TaskRunner ", ":", "x", "2026-01-01T00:00:00Z ",
                                  "stdout F "])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_PREFIX_PIECES, max_size=6).map("".join), min_size=1, max_size=12))
def test_remembered_prefixes_strip_as_the_reference_does(heads):
    """`LogParser` remembers which texts before `step:` are whole prefixes; on any head, fed twice (the second
    time from the memo), its records and counts are the reference's (`_parse`, line by line)."""
    data = "".join(f"{h}step:{i} - a:0.5 - b:np.int32({i})\n" for i, h in enumerate(heads)).encode()
    want, counts = _reference(_fragments(data))
    for _ in range(2):
        p = LogParser()
        assert p.feed(data) + p.finish() == want
        assert p.counters == counts


_STEP_TEXTS = st.one_of(st.integers(0, 10**20).map(str),
                        st.sampled_from(["007", "", " 3", "3abc", "-1", "1.0", "٣", "3 -", "3 - "]))
_HEADS = st.sampled_from(["", "(TaskRunnerV1 pid=3) ", f"{ESC}[36m(TaskRunner pid=9){ESC}[0m ", "(pid=1, ip=x",
                          "2026-01-01T00:00:00Z stdout F ", "we are at ", "tqdm 50%\r", "x\n", "\xff"])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_HEADS, _STEP_TEXTS, st.lists(st.tuples(_KEYS, _VALUE_TEXTS), max_size=5)),
                min_size=1, max_size=8),
       st.integers(1, 400))
def test_log_parser_agrees_with_the_reference_on_generated_feeds(lines, size):
    """Whole feeds of generated step lines (prefixes, near-miss values and keys, noise, invalid UTF-8), fed whole and
    in chunks: the records and every counter are the reference's (`_parse` fragment by fragment)."""
    data = b"".join((h + "step:" + s + "".join(f" - {k}:{v}" for k, v in items)).encode("utf-8", "surrogatepass")
                    .replace(b"\\xff", b"\xff") + b"\n" for h, s, items in lines)
    want, counts = _reference_feed(data)
    whole = LogParser()
    assert _same(whole.feed(data) + whole.finish(), want)
    assert whole.counters == counts
    chunked, got = LogParser(), []
    for i in range(0, len(data), size):
        got += chunked.feed(data[i : i + size])
    assert _same(got + chunked.finish(), want)
    assert chunked.counters == counts
    for text in data.split(b"\n"):  # `parse_line`: the same fast reading of one fragment
        if b"\r" not in text:
            t = text.decode(errors="replace")
            ref = _reference([t])[0]
            assert _same([r for r in [parse_line(t)] if r is not None], ref), t


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab üé\r\n"), max_size=60), st.integers(1, 8), st.integers(1, 9))
def test_splitter_gives_the_reference_fragments(text, limit, size):
    """`LineSplitter`, whole and in chunks: the \\r/\\n-separated pieces of the text, empty ones dropped, those over
    `max_line_bytes` counted as truncated."""
    data = text.encode()
    frags = [f for f in text.replace("\r", "\n").split("\n") if f]
    kept = [f for f in frags if len(f.encode()) <= limit]
    for n in (len(data) or 1, size):
        s = LineSplitter(max_line_bytes=limit)
        got = []
        for i in range(0, len(data), n):
            got += s.feed(data[i : i + n])
        got += s.finish()
        assert got == kept
        assert (s.counters.lines, s.counters.truncated) == (len(frags), len(frags) - len(kept))
