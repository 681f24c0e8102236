"""MetricsSink: append, de-duplicate, restart, re-logged steps, torn lines, CSV == JSONL, NaN policy."""

from __future__ import annotations

import csv
import json
import math

from launcher.metrics import LogParser, MetricsSink, StepRecord
from launcher.metrics.sink import encode_row


def rows(d):
    return [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines()]


def meta(d):
    return json.loads((d / "metrics.meta.json").read_text())


def csv_rows(d):
    with open(d / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


R1 = StepRecord(1, {"a": 0.5, "b": 3})
R2 = StepRecord(2, {"a": 0.75, "b": 4})


def test_rows_appended_in_order_keys_unchanged(tmp_path):
    with MetricsSink(tmp_path) as s:
        assert s.add(StepRecord(0, {"val-core/x/acc/mean@1": 0.7}))
        assert s.add(R1) and s.add(R2)
        # visible (and fsynced) before close: a follower can be killed at any time
        assert [r["step"] for r in rows(tmp_path)] == [0, 1, 2]
    assert rows(tmp_path) == [{"step": 0, "val-core/x/acc/mean@1": 0.7}, {"step": 1, "a": 0.5, "b": 3},
                              {"step": 2, "a": 0.75, "b": 4}]
    assert list(rows(tmp_path)[1]) == ["step", "a", "b"]


def test_reattach_duplicates_are_ignored(tmp_path):
    with MetricsSink(tmp_path) as s:
        assert s.add_many([R1, R2]) == 2
        assert s.add_many([R1, R2, StepRecord(3, {"a": 1.0})]) == 1  # re-attach re-sends 1 and 2
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]
    assert meta(tmp_path)["sink"]["duplicates"] == 2
    assert meta(tmp_path)["relogged"] == []


def test_launcher_restart_same_run_dir_no_duplicates(tmp_path):
    with MetricsSink(tmp_path) as s:
        s.add_many([R1, R2], attempt=0)
    with MetricsSink(tmp_path) as s:
        assert s.steps == [1, 2]
        assert s.add_many([R1, R2, StepRecord(3, {"a": 1.0, "b": 5})], attempt=0) == 1
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]


def test_restart_with_nan_rows_is_still_a_duplicate(tmp_path):
    r = StepRecord(1, {"a": math.nan, "b": math.inf, "c": -math.inf})
    with MetricsSink(tmp_path) as s:
        s.add(r)
    with MetricsSink(tmp_path) as s:
        assert not s.add(StepRecord(1, {"a": math.nan, "b": math.inf, "c": -math.inf}))
        assert s.add(StepRecord(1, {"a": math.nan, "b": -math.inf, "c": -math.inf}))  # differs: re-log
    assert meta(tmp_path)["nonfinite"] == {"1": {"a": "nan", "b": "-inf", "c": "-inf"}}


def test_relogged_step_from_later_attempt_wins_in_place(tmp_path):
    with MetricsSink(tmp_path) as s:
        s.add_many([R1, R2, StepRecord(3, {"a": 0.9, "b": 5})], attempt=0)
        # container restarted (restartCount 1), resumed from the step-1 checkpoint
        new2 = StepRecord(2, {"a": 0.8, "b": 6, "c": 1.0})
        assert s.add_many([new2], attempt=1) == 1
        assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]  # rewritten with step 2 in place
        # the old attempt's log is re-read later (re-attach to previous=true): stale, ignored
        assert s.add_many([R2], attempt=0) == 0
    out = rows(tmp_path)
    assert out[1] == {"step": 2, "a": 0.8, "b": 6, "c": 1.0}
    m = meta(tmp_path)
    assert m["relogged"] == [{"step": 2, "previous_attempt": 0, "attempt": 1}]
    assert m["attempts"] == [0, 1]
    assert m["step_attempt"] == {"1": 0, "2": 1, "3": 0}
    assert m["sink"]["stale"] == 1
    assert not list(tmp_path.glob(".metrics.jsonl.*"))  # no temp file left behind


def test_string_attempts_order_by_first_seen_and_survive_restart(tmp_path):
    with MetricsSink(tmp_path) as s:
        s.add(R1, attempt="uid-a/0")
        s.add(StepRecord(1, {"a": 0.1}), attempt="uid-b/0")
    with MetricsSink(tmp_path) as s:
        assert not s.add(R1, attempt="uid-a/0")  # older attempt, differing values: stale
        assert s.add(StepRecord(1, {"a": 0.2}), attempt="uid-b/0")  # same attempt re-logged: latest wins
    assert rows(tmp_path) == [{"step": 1, "a": 0.2}]
    assert [r["attempt"] for r in meta(tmp_path)["relogged"]] == ["uid-b/0", "uid-b/0"]


def test_relog_within_one_batch_keeps_one_row(tmp_path):
    with MetricsSink(tmp_path) as s:
        assert s.add_many([R1, StepRecord(1, {"a": 9.0})], attempt=0) == 1
    assert rows(tmp_path) == [{"step": 1, "a": 9.0}]


def test_torn_last_line_recovered_on_open(tmp_path):
    with MetricsSink(tmp_path) as s:
        s.add_many([R1, R2])
    p = tmp_path / "metrics.jsonl"
    good = p.read_bytes()
    p.write_bytes(good + b'{"step": 3, "a": 0.')  # crashed mid-write
    with MetricsSink(tmp_path) as s:
        assert s.steps == [1, 2]
        assert p.read_bytes() == good
        s.add(StepRecord(3, {"a": 0.9}))
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]
    assert meta(tmp_path)["sink"]["torn_lines_recovered"] == 1


def test_nan_policy_strict_json_null_and_csv_keeps_value(tmp_path):
    with MetricsSink(tmp_path) as s:
        s.add(StepRecord(1, {"a": math.nan, "b": math.inf, "c": -math.inf, "d": 1.5, "flag": True}))
        s.add(StepRecord(2, {"d": 2.5, "e": 7}))
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text.splitlines()[0], parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert rows(tmp_path)[0] == {"step": 1, "a": None, "b": None, "c": None, "d": 1.5, "flag": True}
    assert meta(tmp_path)["nonfinite"] == {"1": {"a": "nan", "b": "inf", "c": "-inf"}}
    c = csv_rows(tmp_path)
    assert c[0] == {"step": "1", "a": "nan", "b": "inf", "c": "-inf", "d": "1.5", "flag": "True", "e": ""}
    assert c[1] == {"step": "2", "a": "", "b": "", "c": "", "d": "2.5", "e": "7", "flag": ""}


def test_csv_matches_jsonl(tmp_path):
    import simlog

    data = "".join(simlog.generate(steps=12, val_before_train=True, seed=4)).encode()
    p = LogParser()
    with MetricsSink(tmp_path) as s:
        s.add_many(p.feed(data) + p.finish())
        s.add_counters(p.counters)
    j, c = rows(tmp_path), csv_rows(tmp_path)
    assert len(j) == len(c) == 13
    header = list(c[0])
    assert header[0] == "step" and set(header) == set().union(*j)
    for jr, cr in zip(j, c):
        for k in header:
            if k not in jr:
                assert cr[k] == ""
            else:
                v = jr[k]
                assert (float(cr[k]) == v) if isinstance(v, float) else (cr[k] == str(v))
    assert meta(tmp_path)["parser"]["records"] == 13


def test_derived_files_refresh_periodically(tmp_path):
    s = MetricsSink(tmp_path, derived_interval_s=0.0)
    s.add(R1)
    assert len(csv_rows(tmp_path)) == 1  # interval 0: written on every add, not only at close
    s.add(R2)
    assert len(csv_rows(tmp_path)) == 2
    s.close()
    s2 = MetricsSink(tmp_path, derived_interval_s=3600)
    s2.add(StepRecord(3, {"a": 1.0}))
    assert len(csv_rows(tmp_path)) == 2  # not yet: interval not reached
    s2.close()
    assert len(csv_rows(tmp_path)) == 3


def test_counters_accumulate_across_sessions(tmp_path):
    for _ in range(2):
        p = LogParser()
        p.feed(b"noise\nstep:1 - a:1.0\n\xff\n")
        with MetricsSink(tmp_path) as s:
            s.add_many(p.finish())
            s.add_counters(p.counters)
    assert meta(tmp_path)["parser"]["lines"] == 6
    assert meta(tmp_path)["parser"]["non_utf8"] == 2


def test_encode_row_reserved_step_key_and_unicode():
    line, nf = encode_row(5, {"step": 99, "ü/x": 1, "n": math.nan})
    assert json.loads(line) == {"step": 5, "ü/x": 1, "n": None} and nf == {"n": "nan"}


def test_corrupt_middle_row_is_counted_and_never_fatal(tmp_path):
    with MetricsSink(tmp_path) as s:
        s.add_many([R1, R2])
    p = tmp_path / "metrics.jsonl"
    first, second = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(first + b"\xff{not json\n" + second)
    with MetricsSink(tmp_path) as s:
        assert s.steps == [1, 2]
        assert s.add(StepRecord(2, {"a": 0.1}), attempt=1)  # forces a rewrite through the bad row
    text = p.read_bytes()
    assert b'{"step": 2, "a": 0.1}' in text and b'"a": 0.75' not in text
    assert meta(tmp_path)["sink"]["corrupt_rows"] == 1
    assert [r["step"] for r in csv_rows(tmp_path)] == ["1", "2"]


def test_counters_by_source_are_snapshots_not_sums(tmp_path):
    p = LogParser()
    with MetricsSink(tmp_path) as s:
        s.add_many(p.feed(b"noise\nstep:1 - a:1.0\n"))
        s.add_counters(p.counters, source="pod-0/0")
        s.add_many(p.feed(b"step:2 - a:2.0\n"))
        s.add_counters(p.counters, source="pod-0/0")  # same growing object again: no double count
        q = LogParser()
        q.feed(b"x\n")
        s.add_counters(q.counters, source="pod-1/0")
        assert s.counters.lines == 4 and s.counters.records == 2
    with MetricsSink(tmp_path) as s:  # launcher restart: totals carried over
        s.add_counters(q.counters, source="pod-1/0")
    assert meta(tmp_path)["parser"]["lines"] == 5
