"""Attempts as the follower records them (launcher.run.attempts), the report's section, and metric rows across a
recreated pod (MetricsSink's ordering of the follower's `<pod created>/<uid>/<restart>` attempt ids)."""
from __future__ import annotations

import json

import simlog
from launcher.run.attempts import AttemptLog, describe, load, parse_attempt_line, summarise
from launcher.entrypoint.resume import Decision
from launcher.metrics import LogParser, MetricsSink
from launcher.report.attempts import attempts_section

S = 1_000_000_000
OLD = "2026-12-01T10:00:00Z/00000000000000000001/uid-a/000000"
NEW = "2026-12-01T10:05:00Z/00000000000000000002/uid-b/000000"


def test_the_entrypoint_line_round_trips():
    for d in (Decision("fresh", 1, note="no checkpoint yet"),
              Decision("resume", 2, 10, "/c/global_step_10", last_logged=13),
              Decision("fresh", 3, skipped=("global_step_5 skipped: incomplete for world size 2, missing data.pt",),
                       last_logged=7, note="no complete checkpoint"),
              Decision("finished", 4, 25, note="marker /c/launcher-finished.json"),
              Decision("resume", 2, 10, "/c/global_step_10")):  # no file logger: steps lost unknown
        got = parse_attempt_line("[entrypoint] " + d.line())
        assert got is not None, d.line()
        assert (got["attempt"], got["action"], got["step"] or None, got["steps_lost"]) == (
            d.attempt, d.action, d.step, d.steps_lost), d.line()
    assert parse_attempt_line("[entrypoint] role=single-node experiment=x") is None


def _lines(seed: int, steps, entry: str | None):
    """A verl log of `steps` (simlog's values for `seed`), behind the entrypoint's line."""
    want = set(steps)
    out = [f"[entrypoint] {entry}"] if entry else []
    for ln in simlog.generate(steps=max(steps), seed=seed, color=False):
        ln = ln.rstrip("\n")
        rec = LogParser().feed_lines([ln])
        if rec and rec[0].step not in want:
            continue
        out.append(ln)
    return out


def _observe(log: AttemptLog, order, pod, lines, t0, dt=10):
    log.observe(f"{pod}/pytorch/{order}", order, pod, lines, [t0 + i * dt * S for i in range(len(lines))])


def test_summary_of_an_evicted_and_resumed_run(tmp_path):
    log = AttemptLog(tmp_path, interval=0)
    first = _lines(1, range(1, 14), "attempt 1: starting fresh (no checkpoint yet); steps lost: 0")
    second = _lines(2, range(11, 26), "attempt 2: resuming from global_step_10; steps lost: 3 "
                                      "(an earlier attempt logged up to step 13)")
    t0 = 1_800_000_000 * S
    _observe(log, OLD, "master-0", first, t0)
    t_last_old = t0 + (len(first) - 1) * 10 * S
    t1 = t_last_old + 120 * S  # two minutes without a pod
    _observe(log, NEW, "master-0", second, t1)
    log.save(force=True)
    rows = summarise(load(tmp_path))
    assert [(r["attempt"], r["action"], r["resumed_from"], r["first_step"], r["last_step"], r["steps_lost"])
            for r in rows] == [(1, "fresh", 0, 1, 13, 0), (2, "resume", 10, 11, 25, 3)]
    # first step beyond 13 in attempt 2 is step 14; minus one median step (10 s between step lines)
    t14 = t1 + second.index(next(ln for ln in second if "step:14 " in ln)) * 10 * S
    step_gap = 10 * (first.index(next(x for x in first if "step:3 " in x)) - first.index(next(x for x in first if "step:2 " in x)))
    t13 = t0 + first.index(next(ln for ln in first if "step:13 " in ln)) * 10 * S
    assert rows[1]["time_lost_s"] == round((t14 - t13) / S - step_gap, 1) and rows[1]["time_lost_final"]
    assert "resumed from global_step_10" in describe(rows[1]) and "steps lost 3" in describe(rows[1])
    sec = attempts_section(tmp_path)
    assert sec is not None and sec.data["restarts"] == 1 and sec.data["steps_lost"] == 3
    assert "| 2 |" in sec.markdown and "global_step_10" in sec.markdown


def test_without_entrypoint_lines_the_steps_tell(tmp_path):
    log = AttemptLog(tmp_path, interval=0)
    _observe(log, OLD, "master-0", _lines(1, range(1, 9), None), 0)
    _observe(log, NEW, "master-0", _lines(2, range(1, 9), None), 1000 * S)  # an older image restarting at step 1
    rows = summarise(load(tmp_path))
    assert [(r["action"], r["resumed_from"], r["steps_lost"]) for r in rows] == [("fresh", 0, 0), ("fresh", 0, 8)]


def test_a_single_fresh_attempt_adds_no_report_section(tmp_path):
    log = AttemptLog(tmp_path, interval=0)
    _observe(log, OLD, "master-0", _lines(1, range(1, 4), "attempt 1: starting fresh (no checkpoint yet); steps lost: 0"), 0)
    log.save(force=True)
    assert len(summarise(load(tmp_path))) == 1 and attempts_section(tmp_path) is None


def test_a_recreated_pods_rows_win_even_when_the_old_pod_is_read_last(tmp_path):
    """The old pod had restarted twice (restartCount 2); the operator's replacement starts at 0 under a new uid.
    Its creation time orders it later, whichever log the follower happens to read first."""
    old = "2026-12-01T10:00:00Z/00000000000000000001/uid-a/000002"
    a = [r for r in simlog.expected_rows(steps=6, seed=1)]
    b = [r for r in simlog.expected_rows(steps=6, seed=2)]
    from launcher.metrics import StepRecord

    def recs(rows, steps):
        return [StepRecord(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in rows if r["step"] in steps]

    with MetricsSink(tmp_path, fsync=False) as sink:
        sink.add_many(recs(b, range(4, 7)), attempt=NEW)  # the new pod's lines arrive first
        sink.add_many(recs(a, range(1, 7)), attempt=old)  # then the old pod's whole log is re-read
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [4, 5, 6, 1, 2, 3]  # every step once
    by_step = {r["step"]: r for r in rows}
    for s in (4, 5, 6):
        assert by_step[s] == json.loads(json.dumps(b[s - 1]))  # the resumed attempt's values
    for s in (1, 2, 3):
        assert by_step[s] == json.loads(json.dumps(a[s - 1]))
    meta = json.loads((tmp_path / "metrics.meta.json").read_text())
    assert meta["sink"]["stale"] == 3 and all(meta["step_attempt"][str(s)] == NEW for s in (4, 5, 6))


def test_pods_created_in_the_same_second_are_ordered_by_their_first_log_line(tmp_path):
    """An eviction answered at once: the replacement's creationTimestamp (whole seconds) equals the old pod's,
    and its uid may sort first; the first line's time decides (seen on the local cluster)."""
    from launcher.metrics import StepRecord

    old = "2026-12-01T10:00:00Z/01764583200100000000/f49d-old/000000"
    new = "2026-12-01T10:00:00Z/01764583200900000000/a7ca-new/000000"
    with MetricsSink(tmp_path, fsync=False) as sink:
        sink.add(StepRecord(6, {"a": 1.0}), attempt=old)
        assert sink.add(StepRecord(6, {"a": 2.0}), attempt=new)
        assert not sink.add(StepRecord(6, {"a": 1.0}), attempt=old)
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 6, "a": 2.0}
    log = AttemptLog(tmp_path, interval=0)
    _observe(log, new, "master-0", ["step:6 - a:2.0"], 10 * S)
    _observe(log, old, "master-0", ["step:6 - a:1.0"], 1 * S)
    assert [r["stream"] for r in summarise({"streams": log.streams})] == [old, new]
