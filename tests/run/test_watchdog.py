"""The watchdog (launcher.run.watchdog) on simulated logs (simlog, through the real line parser) and on
the recorded verl line of tests/fixtures (verl.md §5.4, produced by verl's own metric functions)."""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import pytest

import simlog
from launcher.metrics import LogParser
from launcher.run.watchdog import Watchdog, WatchdogConfig

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_notes_5_4_line.txt"


def sim_records(steps=25, seed=0, edit=None):
    """simlog's step lines, optionally edited (step, metrics) -> metrics, rendered and parsed as the follower does."""
    lines = []
    for step, m in simlog.step_metrics(steps=steps, seed=seed):
        m = dict(m)
        if edit:
            m = edit(step, m)
        lines.append(f"\x1b[36m(TaskRunnerV1 pid=4242)\x1b[0m {simlog.concat_dict_to_str(m, step)}")
    return LogParser().feed_lines(lines)


def replay(dog, records, *, tick=1.0, t0=0.0, phase="Running", start_up=60.0, after=None):
    """Feed records at the times verl took (timing_s/step), ticking every `tick` seconds; all findings."""
    found, now = [], t0
    found += dog.tick(phase, now)
    first = True
    for rec in records:
        dur = start_up if first else float(rec.metrics["timing_s/step"])
        first = False
        end = now + dur
        while now + tick < end:
            now += tick
            found += dog.tick(phase, now)
        now = end
        found += dog.observe([rec], now)
        found += dog.tick(phase, now)
    if after:
        end = now + after
        while now < end:
            now += tick
            found += dog.tick(phase, now)
    return found, now


def test_seed_shaped_run_with_a_slow_first_step_raises_nothing():
    recs = sim_records(steps=25, seed=0)
    times = [r.metrics["timing_s/step"] for r in recs]
    median = statistics.median(times)
    # the premise: step 1 is much slower than the rest (warm-up); make it 4x the median exactly
    assert times[0] > 2 * median
    recs[0].metrics["timing_s/step"] = 4 * median
    strict = Watchdog(WatchdogConfig(stall_factor=3.0, stall_min_s=0.0))
    # step 1's own wall time is also 4x the median (start-up before it included)
    found, _ = replay(strict, recs, start_up=4 * median)
    assert found == []
    assert strict.median_step_s() == pytest.approx(statistics.median([4 * median, *times[1:]]))


def test_a_restart_then_a_slow_step_is_not_a_stall():
    recs = sim_records(steps=12, seed=1)
    median = statistics.median(r.metrics["timing_s/step"] for r in recs)
    dog = Watchdog(WatchdogConfig(stall_factor=3.0, stall_min_s=0.0))
    found, now = replay(dog, recs[:6])
    # the pod restarts: Restarting for a while, then the new attempt warms up for 4x the median
    for _ in range(int(10 * median)):
        now += 1
        found += dog.tick("Restarting", now)
    found += replay(dog, recs[6:], t0=now, start_up=4 * median)[0]
    assert found == []


@pytest.mark.parametrize("factor,floor", [(3.0, 0.0), (3.0, 200.0), (1.5, 10.0)])
def test_stall_is_flagged_once_within_the_bound(factor, floor):
    recs = sim_records(steps=10, seed=2)
    dog = Watchdog(WatchdogConfig(stall_factor=factor, stall_min_s=floor))
    found, last = replay(dog, recs)
    assert found == []
    bound = max(floor, factor * statistics.median(r.metrics["timing_s/step"] for r in recs))
    assert dog.stall_bound() == pytest.approx(bound)
    stalls = []
    now = last
    while now < last + 3 * bound:
        now += 1.0
        got = dog.tick("Running", now)
        if got and not stalls:
            flagged_at = now
        stalls += got
    assert len(stalls) == 1, stalls
    s = stalls[0]
    assert s.kind == "stall" and s.step == 10 and s.key == "stall@10"
    assert bound < flagged_at - last <= bound + 1.0  # flagged within one tick of the bound, never before
    assert s.evidence["last_step"] == 10 and s.evidence["bound_s"] == pytest.approx(bound, abs=0.1)
    assert "after step 10" in s.message
    # a new step, then silence again: a new stall (after step 11), reported once more
    more = sim_records(steps=11, seed=2)[-1:]
    assert dog.observe(more, now) == []
    assert [f.key for f in dog.tick("Running", now + bound + 1)] == ["stall@11"]


def test_no_stall_while_not_running_and_the_clock_restarts_at_the_next_step():
    recs = sim_records(steps=5, seed=3)
    dog = Watchdog(WatchdogConfig(stall_factor=2.0, stall_min_s=0.0))
    _, last = replay(dog, recs)
    bound = dog.stall_bound()
    assert dog.tick("Pending", last + 10 * bound) == []
    assert dog.tick("Running", last + 11 * bound) == []  # disarmed until a step arrives
    more = sim_records(steps=6, seed=3)[-1:]
    dog.observe(more, last + 12 * bound)
    assert dog.tick("Running", last + 12.5 * bound) == []
    assert [f.kind for f in dog.tick("Running", last + 13.5 * bound)] == ["stall"]


def test_before_the_first_step_nothing_is_flagged():
    dog = Watchdog(WatchdogConfig(stall_min_s=0.0))
    assert dog.tick("Running", 0) == [] and dog.tick("Running", 1e6) == []


def test_arrival_gaps_are_the_median_when_lines_carry_no_step_time():
    recs = [r.__class__(r.step, {k: v for k, v in r.metrics.items() if k != "timing_s/step"})
            for r in sim_records(steps=6, seed=4)]
    dog = Watchdog(WatchdogConfig(stall_factor=2.0, stall_min_s=0.0))
    for i, r in enumerate(recs):
        dog.observe([r], 100.0 + 30.0 * i)
    assert dog.median_step_s() == pytest.approx(30.0)
    assert dog.tick("Running", 100 + 30 * 5 + 59) == []
    assert [f.kind for f in dog.tick("Running", 100 + 30 * 5 + 61)] == ["stall"]


@pytest.mark.parametrize("level", [0.0, 1.0])
def test_reward_collapse_after_n_steps_stuck(level):
    def edit(step, m):
        if step >= 10:
            m["critic/score/mean"] = level
        return m

    dog = Watchdog(WatchdogConfig(collapse_steps=5))
    found = dog.observe(sim_records(steps=13, edit=edit), 0.0)
    assert found == []  # 4 steps stuck: not yet
    found = dog.observe(sim_records(steps=16, edit=edit)[13:], 1.0)
    assert [(f.kind, f.step) for f in found] == [("reward_collapse", 14)]
    assert found[0].evidence["steps"] == [10, 11, 12, 13, 14] and found[0].evidence["value"] == int(level)
    assert f"stuck at {int(level)}" in found[0].message
    assert dog.observe(sim_records(steps=18, edit=edit)[16:], 2.0) == []  # once


def test_reward_alternating_between_0_and_1_is_not_a_collapse():
    dog = Watchdog(WatchdogConfig(collapse_steps=3))
    found = dog.observe(sim_records(steps=12, edit=lambda s, m: {**m, "critic/score/mean": float(s % 2)}), 0.0)
    assert [f.kind for f in found] == []


def test_entropy_collapse():
    def edit(step, m):
        if step >= 8:
            m["actor/entropy"] = m["actor/entropy"] * 0.05
        return m

    dog = Watchdog(WatchdogConfig(collapse_steps=5, entropy_ratio=0.1))
    found = dog.observe(sim_records(steps=20, edit=edit), 0.0)
    assert [(f.kind, f.step) for f in found] == [("entropy_collapse", 12)]
    assert found[0].evidence["steps"] == [8, 9, 10, 11, 12]
    # the untouched run: entropy drifts down (x0.7 by the end) but never collapses
    assert Watchdog().observe(sim_records(steps=25), 0.0) == []


def test_clip_ratio_jump():
    def edit(step, m):
        if step == 12:
            m["response_length/clip_ratio"] = 0.5
        return m

    found = Watchdog(WatchdogConfig(clip_jump=0.2)).observe(sim_records(steps=20, edit=edit), 0.0)
    assert [(f.kind, f.step) for f in found] == [("clip_jump", 12)]
    assert found[0].evidence["value"] == 0.5 and found[0].evidence["baseline"] < 0.05


@pytest.mark.parametrize("key,value", [("actor/pg_loss", math.nan), ("actor/grad_norm", math.inf),
                                       ("actor/grad_norm", -math.inf)])
def test_non_finite_loss_or_grad_norm(key, value):
    def edit(step, m):
        if step == 7:
            m[key] = value
        return m

    recs = sim_records(steps=9, edit=edit)
    assert isinstance(recs[6].metrics[key], float) and not math.isfinite(recs[6].metrics[key])
    found = Watchdog().observe(recs, 0.0)
    assert [(f.kind, f.step, f.key) for f in found] == [("nonfinite", 7, f"nonfinite:{key}")]
    assert found[0].evidence["value"] == repr(value)


def test_seen_keys_are_not_reported_again():
    def edit(step, m):
        return {**m, "actor/pg_loss": math.nan} if step == 3 else m

    assert Watchdog(seen=["nonfinite:actor/pg_loss"]).observe(sim_records(steps=5, edit=edit), 0.0) == []


def test_seeded_history_starts_the_stall_clock_at_watch_start():
    rows = [{"step": r.step, **r.metrics} for r in sim_records(steps=8, seed=5)]
    dog = Watchdog(WatchdogConfig(stall_factor=3.0, stall_min_s=0.0))
    assert dog.seed(rows, now=1000.0) == []
    bound = dog.stall_bound()
    assert dog.tick("Running", 1000.0 + bound - 1) == []
    assert [f.key for f in dog.tick("Running", 1000.0 + bound + 1)] == ["stall@8"]


def test_bad_thresholds_name_the_flag():
    probs = WatchdogConfig(stall_factor=0, stall_min_s=-1, collapse_steps=1, entropy_ratio=1.5,
                           clip_jump=0).problems()
    assert [p.split(":")[0] for p in probs] == ["--stall-factor", "--stall-min", "--collapse-steps",
                                                "--entropy-ratio", "--clip-jump"]
    assert "got 1.5" in probs[3]
    assert WatchdogConfig().problems() == []


# --- the recorded verl line (tests/fixtures/verl_notes_5_4_line.txt) ---------------------------------------

def recorded_log(steps, values):
    """`steps` lines of the recorded verl line, step numbers and the given metric values substituted as text."""
    line = FIXTURE.read_text().strip()
    out = []
    for step in range(1, steps + 1):
        text = re.sub(r"^step:\d+", f"step:{step}", line)
        text = re.sub(r"training/global_step:\d+", f"training/global_step:{step}", text)
        for key, fn in values.items():
            v = fn(step)
            if v is not None:
                text, n = re.subn(rf"(?<= - ){re.escape(key)}:[^ ]+", f"{key}:{v}", text)
                assert n == 1, key
        out.append(f"(TaskRunnerV1 pid=11992) {text}")
    return LogParser().feed_lines(out)


def test_recorded_line_healthy_run_raises_nothing_and_findings_on_edited_values():
    healthy = recorded_log(12, {})
    assert len(healthy) == 12 and healthy[0].metrics["critic/score/mean"] == 0.625
    assert Watchdog().observe(healthy, 0.0) == []
    bad = recorded_log(12, {
        "critic/score/mean": lambda s: "1.0" if s >= 4 else None,
        "actor/grad_norm": lambda s: "np.float64(nan)" if s == 9 else None,
        "response_length/clip_ratio": lambda s: "0.75" if s == 11 else None,
        "actor/entropy": lambda s: "0.002" if s >= 6 else None,
    })
    found = Watchdog(WatchdogConfig(collapse_steps=5)).observe(bad, 0.0)
    assert sorted((f.kind, f.step) for f in found) == [
        ("clip_jump", 11), ("entropy_collapse", 10), ("nonfinite", 9), ("reward_collapse", 8)]
    # a stall on the recorded line's timing (timing_s/step:19.3)
    dog = Watchdog(WatchdogConfig(stall_factor=3.0, stall_min_s=0.0))
    dog.observe(healthy, 0.0)
    assert dog.median_step_s() == pytest.approx(19.3)
    assert dog.tick("Running", 57.8) == [] and [f.kind for f in dog.tick("Running", 58.0)] == ["stall"]


# --- the session that wires it to a follower (tests/kube_fakes.FakeKube; the real API in tests/e2e) -----------

def _session(tmp_path, kube, on_stall, clock):
    from launcher.cli.watchdog import WatchSession
    from launcher.kube import jobs as J
    from launcher.run.dirs import RunDir

    kube.put(__import__("kube_fakes").pytorchjob("j-1"))
    ref = J.JobRef("pytorchjob", "j-1", kube.get(J.JOB_RESOURCES["pytorchjob"], "j-1"))
    shown = []
    s = WatchSession(kube, ref, RunDir(tmp_path / "j-1").ensure(), WatchdogConfig(stall_factor=2.0, stall_min_s=0.0),
                     on_stall=on_stall, emit=shown.append, clock=clock)
    return s, shown


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _running():
    from launcher.kube import jobs as J

    return J.JobState("Running", False, False, "")


def test_session_writes_each_finding_once_and_deletes_a_stalled_run(tmp_path):
    import json

    from kube_fakes import FakeKube

    kube, clock = FakeKube(), _Clock()
    session, shown = _session(tmp_path, kube, "delete", clock)
    recs = sim_records(steps=4, seed=7, edit=lambda s, m: {**m, "actor/grad_norm": math.inf} if s == 2 else m)
    session.records(recs)
    clock.t = 2.0 * session.dog.stall_bound() + 1
    session.status(_running(), [])
    session.status(_running(), [])
    rows = [json.loads(x) for x in (tmp_path / "j-1" / "findings.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["action"]) for r in rows] == [("nonfinite", None), ("stall", "delete")]
    assert [f.kind for f in shown] == ["nonfinite", "stall"]
    assert ("PyTorchJob", "j-1") in kube.deleted and session.deleted_reason.startswith("stalled: no new step")
    # a later session over the same run directory does not report them again
    kube2 = FakeKube()
    again, shown2 = _session(tmp_path, kube2, "report", _Clock())
    again.records(recs)
    assert shown2 == [] and kube2.deleted == []


def test_session_report_only_keeps_the_run(tmp_path):
    from kube_fakes import FakeKube

    kube, clock = FakeKube(), _Clock()
    session, shown = _session(tmp_path, kube, "report", clock)
    session.records(sim_records(steps=3, seed=8))
    clock.t = 1e6
    session.status(_running(), [])
    assert [f.kind for f in shown] == ["stall"] and kube.deleted == [] and session.deleted_reason is None


# --- the spec's RL health rules (health:) ------------------------------------------------------------------------


def _health(**rules):
    from launcher.spec.model import HealthSpec

    return HealthSpec.model_validate(rules)


def test_default_health_rules_raise_nothing_on_a_healthy_run():
    found, _ = replay(Watchdog(health=_health()), sim_records(steps=25, seed=3))
    assert found == []


def test_no_signal_after_k_steps_of_zero_advantages_with_its_action():
    zero = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0, "critic/advantages/mean": 0.0}
    recs = sim_records(steps=12, seed=1, edit=lambda s, m: {**m, **zero} if s >= 4 else m)
    found = Watchdog(health=_health(no_signal={"steps": 4, "action": "stop"})).observe(recs, 0.0)
    (f,) = [f for f in found if f.kind == "no_signal"]
    assert (f.step, f.rule_action, f.evidence["steps"]) == (7, "stop", [4, 5, 6, 7])
    assert f.message.startswith("health rule no_signal (stop): critic/advantages/max = min = 0")
    # a step with a signal in between resets the count
    gap = sim_records(steps=12, seed=1, edit=lambda s, m: {**m, **zero} if s in (2, 3, 4, 6, 7, 8) else m)
    assert not [f for f in Watchdog(health=_health(no_signal={"steps": 4})).observe(gap, 0.0) if f.kind == "no_signal"]


def test_clip_pinned_kl_and_entropy_drift():
    recs = sim_records(steps=14, seed=2, edit=lambda s, m: {
        **m, "response_length/clip_ratio": 0.95 if s >= 5 else 0.1, "actor/ppo_kl": 0.2 if s >= 9 else 0.001,
        "actor/entropy": 0.5 if s <= 3 else (1.2 if s >= 10 else 0.55)})
    found = Watchdog(health=_health(clip_pinned={"ratio": 0.9, "steps": 3},
                                    kl_drift={"max": 0.05, "steps": 2, "action": "stop"},
                                    entropy_drift={"max_change": 1.0, "steps": 3})).observe(recs, 0.0)
    got = {f.kind: (f.step, f.rule_action) for f in found if f.kind in ("clip_pinned", "kl_drift", "entropy_drift")}
    assert got == {"clip_pinned": (7, "warn"), "kl_drift": (10, "stop"), "entropy_drift": (12, "warn")}
    # off while their bound is null (the defaults)
    assert not [f for f in Watchdog(health=_health()).observe(recs, 0.0) if f.kind in ("kl_drift", "entropy_drift")]


def test_a_stop_rule_deletes_the_run_and_a_warn_rule_keeps_it(tmp_path):
    import json

    from kube_fakes import FakeKube

    from launcher.cli.watchdog import WatchSession, deleted_exit
    from launcher.kube import jobs as J
    from launcher.run.dirs import RunDir

    zero = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0}
    recs = sim_records(steps=6, seed=4, edit=lambda s, m: {**m, **zero})
    for action, deleted in (("warn", False), ("stop", True)):
        kube = FakeKube()
        kube.put(__import__("kube_fakes").pytorchjob("j-1"))
        ref = J.JobRef("pytorchjob", "j-1", kube.get(J.JOB_RESOURCES["pytorchjob"], "j-1"))
        run = RunDir(tmp_path / action / "j-1").ensure()
        s = WatchSession(kube, ref, run, WatchdogConfig(), health=_health(no_signal={"steps": 3, "action": action}),
                         emit=lambda f: None, clock=_Clock())
        s.records(recs)
        rows = [json.loads(x) for x in run.findings.read_text().splitlines()]
        assert [(r["kind"], r["rule_action"], r["action"]) for r in rows] == [
            ("no_signal", action, "delete" if deleted else None)]
        assert (("PyTorchJob", "j-1") in kube.deleted) is deleted
        assert (deleted_exit(s) == 1) is deleted


def test_the_session_records_what_it_watched_with_every_check_and_its_threshold(tmp_path):
    """watchdog.json: the steps the watchdog saw and each check, on or off, with its threshold; a healthy run's empty
    findings are read with it (tests/e2e: the real runs)."""
    import json

    from kube_fakes import FakeKube

    kube, clock = FakeKube(), _Clock()
    session, _ = _session(tmp_path, kube, "report", clock)
    recs = sim_records(steps=7, seed=3)
    session.records(recs[:4])
    seen = json.loads(session.run_dir.watched.read_text())
    assert (seen["steps_seen"], seen["first_step"], seen["last_step"]) == (4, 1, 4), seen
    session.records(recs[4:])
    seen = json.loads(session.run_dir.watched.read_text())
    assert (seen["steps_seen"], seen["first_step"], seen["last_step"]) == (7, 1, 7), seen
    assert seen["checks"]["stall"] == {"on": True, "stall_factor": 2.0, "stall_min_s": 0.0}
    assert seen["checks"]["no_signal"] == {"on": True, "steps": 5}
    assert seen["checks"]["kl_drift"]["on"] is False and seen["checks"]["clip_pinned"]["on"] is False
    assert set(seen["checks"]) == {"stall", "reward_collapse", "entropy_collapse", "clip_jump", "nonfinite",
                                   "no_signal", "clip_pinned", "kl_drift", "entropy_drift"}
    assert seen["reported"] == [] and not session.run_dir.findings.exists()  # a healthy run: nothing to report


def test_watched_names_every_kind_the_watchdog_can_report():
    """A check the watchdog gains is listed in watchdog.json too (or a healthy run would not show it was on)."""
    from launcher.run.watchdog import KINDS

    on = _health(kl_drift={"max": 0.5}, clip_pinned={"ratio": 0.9}, entropy_drift={"max_change": 0.5})
    checks = Watchdog(health=on).watched()["checks"]
    assert set(checks) == set(KINDS) and all(c["on"] for c in checks.values()), checks
