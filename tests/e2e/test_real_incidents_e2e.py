"""Incidents on real verl training (issue 31; grpo-exp3-cpu, the real nodes).

- One real run stalled twice (one run for all of it: the real-node tests run one after another, CI's critical path):
  - vLLM's engine process stopped with SIGSTOP after a checkpoint: the stall captures an incident whose stacks
    include vLLM's frames and whose verdict is `rollout`; `--on-stall restart` deletes the stuck attempt's pod and
    the run resumes from the checkpoint;
  - then the actor's worker process stopped inside its update: that incident names it as the suspect and
    classifies the stall `update` (or `collective`) from its own frames; the budget spent, the run gives up: exit 1,
    each incident named, the job deleted; the report lists both incidents.
  A resumed run that completes, each step once: tests/e2e/test_real_faults_training_e2e.py.
- An override verl's Hydra config refuses: classified a configuration error, never trained again.
"""

from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import rows, run_launcher
from real_runs import CONFIG, Following, incidents, sets_for, stop_actor_in_update, stop_vllm_engine
from real_runs import real_node, volume  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


STALL_FLAGS = ("--stall-min", "30", "--stall-factor", "5")  # a few-second step: the clock starts at the first step


def test_a_run_that_stalls_after_every_restart_gives_up_when_the_budget_is_spent(real_node, namespace, volume,
                                                                                   tmp_path):
    from launcher.run.attempts import load, summarise
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
    # the first: vLLM's engine stopped, read from its own frames; the stuck attempt's pod deleted and the run resumed
    inc = found[0]
    assert inc["verdict"]["class"] == "rollout", inc["verdict"]
    assert "VLLM::EngineCore (stopped)" in " ".join(inc["verdict"]["suspects"]), inc["verdict"]
    assert any("vllm/" in f for f in inc["verdict"]["frames"]), inc["verdict"]
    [pod] = [p.name for p in (inc["dir"] / "stacks").glob("*.txt")]
    text = (inc["dir"] / "stacks" / pod).read_text()
    assert "[stopped]" in text and "vllm/v1/engine/core.py" in text and "verl/trainer/" in text, text[:2000]
    assert (inc["dir"] / "logs" / pod.replace(".txt", ".log")).read_text().strip()
    assert inc["last_step"]["step"] >= 3 and inc["last_step"]["timings_s"]["gen"] > 0, inc["last_step"]
    findings = [json.loads(ln) for ln in (run / "findings.jsonl").read_text().splitlines() if ln.strip()]
    assert [(f["action"], f["incident"]) for f in findings if f["kind"] == "stall"] == [
        ("restart", inc["dir"].name), ("delete", found[1]["dir"].name)], findings  # giving up deletes the run
    attempts = summarise(load(run))
    assert [a["action"] for a in attempts] == ["fresh", "resume"], attempts
    assert 2 <= attempts[1]["resumed_from"] <= first, attempts[1]  # save_freq 2: a checkpoint at or before the stall
    assert "watchdog: --on-stall restart (1/1)" in err, err[-3000:]
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
    code, _, report_err = run_launcher(["report", str(run)], info, runs, timeout=300)
    assert code == 0, report_err
    report = (run / "report.md").read_text()
    assert "## Incidents" in report and all(i["dir"].name in report for i in found) and "rollout" in report, \
        report[-3000:]


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

