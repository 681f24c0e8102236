"""Incidents on real verl training (issue 31; grpo-exp3-cpu, the real nodes).

- vLLM's engine process stopped with SIGSTOP after a checkpoint: the stall captures an incident whose stacks include
  vLLM's frames and whose verdict is `rollout`; `--on-stall restart` deletes the stuck attempt's pod, the run
  resumes from the checkpoint and completes, each step once; the report lists the incident.
- Stopped again after every restart, the run gives up when the budget is spent: exit 1, each incident named. The
  second stop is the actor's worker process inside its update: that incident names it as the suspect and classifies
  the stall `update` (or `collective`) from its own frames (one real run for both: CI's real-node lane is its
  critical path).
- An override verl's Hydra config refuses: classified a configuration error, never trained again.
"""

from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import rows, run_launcher
from real_runs import CONFIG, Following, checkpointed, incidents, sets_for, stop_actor_in_update, stop_vllm_engine
from real_runs import real_node, volume  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


STALL_FLAGS = ("--stall-min", "30", "--stall-factor", "5")  # a few-second step: the clock starts at the first step


def test_a_stopped_vllm_engine_is_captured_as_rollout_and_the_restarted_run_resumes_and_completes(
        real_node, namespace, volume, tmp_path):
    from launcher.run.attempts import load, summarise
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    steps, save = 12, 5
    sets = sets_for(steps, f"trainer.save_freq={save}", "run_policy.backoff_limit=2")
    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets]).job_name
    follower = Following(info, ns, runs, sets, "--on-stall", "restart", "--max-restarts", "2", *STALL_FLAGS)
    with follower:
        ks.wait_for(lambda: checkpointed(volume, save), timeout=900, interval=1, what=f"global_step_{save}")
        stop_vllm_engine(info, ns)
    rc, err = follower.wait(timeout=1200)
    assert rc == 0, err[-4000:]
    run = runs / job

    [inc] = incidents(run)
    assert inc["action"] == "restart" and inc["verdict"]["class"] == "rollout", inc["verdict"]
    assert "VLLM::EngineCore (stopped)" in " ".join(inc["verdict"]["suspects"]), inc["verdict"]
    assert any("vllm/" in f for f in inc["verdict"]["frames"]), inc["verdict"]
    [pod] = [p.name for p in (inc["dir"] / "stacks").glob("*.txt")]
    text = (inc["dir"] / "stacks" / pod).read_text()
    assert "[stopped]" in text and "vllm/v1/engine/core.py" in text and "verl/trainer/" in text, text[:2000]
    assert (inc["dir"] / "logs" / pod.replace(".txt", ".log")).read_text().strip()
    assert inc["last_step"]["step"] >= save and inc["last_step"]["timings_s"]["gen"] > 0, inc["last_step"]
    findings = [json.loads(ln) for ln in (run / "findings.jsonl").read_text().splitlines() if ln.strip()]
    assert [(f["kind"], f["action"], f["incident"]) for f in findings if f["kind"] == "stall"] == [
        ("stall", "restart", inc["dir"].name)], findings

    attempts = summarise(load(run))
    assert [a["action"] for a in attempts] == ["fresh", "resume"], attempts
    assert attempts[1]["resumed_from"] == save and 0 <= attempts[1]["steps_lost"] <= save, attempts[1]
    assert [r["step"] for r in rows(run)] == list(range(1, steps + 1))  # each step once
    assert "watchdog: --on-stall restart (1/2)" in err, err[-3000:]

    code, _, report_err = run_launcher(["report", str(run)], info, runs, timeout=300)
    assert code == 0, report_err
    report = (run / "report.md").read_text()
    assert "## Incidents" in report and inc["dir"].name in report and "rollout" in report, report[-3000:]


def test_a_run_that_stalls_after_every_restart_gives_up_when_the_budget_is_spent(real_node, namespace, volume,
                                                                                   tmp_path):
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    sets = sets_for(25, "trainer.save_freq=2", "run_policy.backoff_limit=2")
    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets]).job_name
    run = runs / job
    follower = Following(info, ns, runs, sets, "--on-stall", "restart", "--max-restarts", "1", *STALL_FLAGS)
    with follower:
        ks.wait_for(lambda: len(rows(run)) >= 3, timeout=900, interval=1, what="3 real steps")
        stop_vllm_engine(info, ns)
        ks.wait_for(lambda: len(incidents(run)) == 1, timeout=300, interval=1, what="the first incident")
        first = max(r["step"] for r in rows(run))
        # the restarted attempt resumes from a checkpoint at or before `first`: a step after it is its own
        ks.wait_for(lambda: max(r["step"] for r in rows(run)) > first, timeout=900, interval=1,
                    what="a step of the restarted attempt")
        # stalled again, elsewhere: the actor's worker stopped inside its update
        pid, seen = stop_actor_in_update(info, ns)
    rc, err = follower.wait(timeout=900)
    assert rc == 1, err[-4000:]
    found = incidents(run)
    assert [i["action"] for i in found] == ["restart", "give_up"], [(i["action"], i["verdict"]) for i in found]
    assert found[0]["verdict"]["class"] == "rollout", found[0]["verdict"]
    v = found[1]["verdict"]  # classified from the stopped actor's own frames
    assert v["class"] in ("update", "collective"), (v, seen)
    assert any(s.startswith(f"{pid} ray::WorkerDict") and s.endswith("(stopped)") for s in v["suspects"]), v
    assert v["process"].startswith(f"{pid} ray::WorkerDict"), v
    assert v["why"].startswith("process stopped: ") or v["why"].startswith("a thread waits in a collective: "), v
    assert max(r["step"] for r in rows(run)) > first  # the restarted attempt trained before it stalled again
    reason = err[err.index("run deleted by the watchdog (--on-stall restart, budget spent): "):]
    assert "stalled 2 time(s), gave up after 1 restart(s) (max 1)" in reason, reason
    assert all(str(i["dir"]) in reason for i in found), (reason, [i["dir"] for i in found])
    gone = info.kubectl("get", "pytorchjob", job, "-n", ns, "-o", "name", check=False)
    assert "NotFound" in gone.stderr or not gone.stdout.strip(), (gone.stdout, gone.stderr)


def test_a_configuration_error_verl_refuses_is_not_trained_again(real_node, namespace, volume, tmp_path):
    """An override verl's Hydra config refuses (the launcher checks its syntax, not verl's keys): the first attempt
    fails with Hydra's error, classified `config`; the operator's retries (backoff_limit 2) stop at once without
    starting verl again, and the run fails."""
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    bad = "actor_rollout_ref.actor.no_such_key=1"
    sets = sets_for(12, "run_policy.backoff_limit=2", f"verl.overrides+={bad}")
    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets]).job_name
    rc, err = Following(info, ns, runs, sets).wait(timeout=900)
    assert rc == 1, err[-3000:]
    raw = "".join(p.read_text(errors="replace") for p in (runs / job / "logs").glob("*.log"))
    assert raw.count("[entrypoint] starting verl: ") == 1, raw[-4000:]  # trained once, never retried
    assert "Could not override 'actor_rollout_ref.actor.no_such_key'." in raw  # verl's own words, passed through
    assert "[entrypoint] verl failed: config (Hydra override: Could not override 'actor_rollout_ref.actor." in raw
    refusals = raw.count("[entrypoint] not training: attempt 1 failed with a configuration error (Hydra override")
    assert refusals >= 1, raw[-4000:]  # each retry the operator made stopped before verl
    assert rows(runs / job) == []

