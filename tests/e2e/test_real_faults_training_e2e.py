"""Resume, the watchdog and the health rules judged on real verl training (grpo-exp3-cpu, the real nodes).

- The trainer container killed from the node (its processes, SIGKILL, not an API call) after verl wrote the
  global_step_5 checkpoint: the container restarts in place, the entrypoint picks global_step_5, verl resumes
  there and the run completes; attempts.json shows the resume point, metrics.jsonl holds each step once with the
  resumed attempt's values, and verl's own file logger agrees.
- Every process of the trainer container stopped with SIGSTOP mid-run (a real hang): the follower's watchdog flags
  a stall, captures an incident, and `--on-stall delete` ends the run with exit 1.
- A reward file that always returns 0 (no learning signal): the `health.no_signal` rule with action `stop` ends the
  run with exit 1 and the reason.
"""

from __future__ import annotations

import json
import math

import pytest

import kwok_support as ks
import realnode as rn
from launcher_helpers import rows
from real_runs import CONFIG, Following, checkpointed, incidents, master, sets_for
from real_runs import real_node, volume  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


def test_trainer_killed_after_a_checkpoint_resumes_from_it_and_completes(real_node, namespace, volume, tmp_path):
    from launcher.run.attempts import load, summarise
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    steps, save = 12, 5  # latest_checkpointed_iteration stays 5 until step 10: time to see it and kill
    sets = sets_for(steps, f"trainer.save_freq={save}", "run_policy.backoff_limit=2")  # a restart is allowed
    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets]).job_name
    follower = Following(info, ns, runs, sets)

    with follower:
        ks.wait_for(lambda: checkpointed(volume, save), timeout=900, interval=1,
                    what=f"verl's global_step_{save} checkpoint")
        rn.kill_container(master(info, ns))  # every process of the trainer, from the node
    rc, err = follower.wait(timeout=1200)
    assert rc == 0, err[-4000:]
    run = runs / job

    attempts = summarise(load(run))
    assert [a["action"] for a in attempts] == ["fresh", "resume"], attempts
    second = attempts[1]
    assert second["resumed_from"] == save and second["first_step"] == save + 1 and second["last_step"] == steps, second
    assert 0 <= second["steps_lost"] <= save, second  # lost at most save_freq steps

    mine = rows(run)
    assert [r["step"] for r in mine] == list(range(1, steps + 1)), [r["step"] for r in mine]  # each step once
    # verl's own file logger (the entrypoint points each attempt at the run's volume): every step once or more, the
    # resumed attempt's record last for the steps it redid; the launcher's values are that last record
    verl: dict[int, dict] = {}
    for path in sorted(volume.glob("checkpoints/**/metrics/*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                verl[rec["step"]] = rec["data"]
    assert sorted(verl) == list(range(1, steps + 1)), sorted(verl)
    for r in mine:
        for key, value in verl[r["step"]].items():
            if isinstance(value, (int, float)) and isinstance(r.get(key), (int, float)):
                assert math.isclose(r[key], value, rel_tol=1e-6, abs_tol=1e-9), (r["step"], key, r[key], value)
    raw = "".join(p.read_text(errors="replace") for p in (run / "logs").glob("*.log"))
    assert f"attempt 2: resuming from global_step_{save}" in raw, raw[-3000:]


def test_a_stopped_trainer_is_flagged_as_a_stall_and_deleted(real_node, namespace, volume, tmp_path):
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    sets = sets_for(25)
    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets]).job_name
    # a short bound, as a user would set for a few-second step: the clock starts at the first step (warm-up excluded)
    follower = Following(info, ns, runs, sets, "--on-stall", "delete", "--stall-min", "30", "--stall-factor", "5")
    with follower:
        ks.wait_for(lambda: (runs / job / "metrics.jsonl").exists() and len(rows(runs / job)) >= 3,
                    timeout=900, interval=1, what="3 real steps")
        pod = master(info, ns)
        rn.ctr("tasks", "kill", "--all", "-s", "SIGSTOP", rn.container_id(pod), node=pod["spec"]["nodeName"])  # a hang
    rc, err = follower.wait(timeout=600)
    assert rc == 1, err[-3000:]
    findings = [json.loads(ln) for ln in (runs / job / "findings.jsonl").read_text().splitlines() if ln.strip()]
    assert [f["kind"] for f in findings] == ["stall"], findings
    assert "stall" in err and "deleted" in err, err[-3000:]
    gone = info.kubectl("get", "pytorchjob", job, "-n", ns, "-o", "name", check=False)
    assert "NotFound" in gone.stderr or not gone.stdout.strip(), (gone.stdout, gone.stderr)
    last = rows(runs / job)[-1]["step"]
    assert 3 <= last < 25, last
    # the incident: every process of the container is a suspect (stopped), their stacks read all the same
    [inc] = incidents(runs / job)
    assert inc["action"] == "delete" and findings[0]["incident"] == inc["dir"].name, (inc["action"], findings)
    assert len(inc["verdict"]["suspects"]) > 5 and all(s.endswith("(stopped)") for s in inc["verdict"]["suspects"])
    assert inc["verdict"]["class"] != "unknown" and inc["stack_errors"] == {}, inc["verdict"]
    assert "[stopped]" in next((inc["dir"] / "stacks").glob("*.txt")).read_text()
    assert f"(incident {inc['dir']})" in err, err[-3000:]


def test_a_reward_that_is_always_zero_trips_the_no_signal_rule_and_stop_ends_the_run(real_node, namespace, volume,
                                                                                      tmp_path):
    """issue 31's health rule on real training: every sample scores 0, so every group's advantages are 0; with
    `health.no_signal: {steps: 2, action: stop}` the follower deletes the run at step 2 and exits 1 with the reason."""
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    (tmp_path / "zero.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                      "    return 0.0\n")
    sets = sets_for(25, f"reward.function.path={tmp_path / 'zero.py'}", "health.no_signal.steps=2",
                    "health.no_signal.action=stop")
    job = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets]).job_name
    rc, err = Following(info, ns, runs, sets).wait(timeout=900)
    assert rc == 1, err[-3000:]
    assert "run deleted by the watchdog (a health rule's stop): health rule no_signal (stop): " in err, err[-3000:]
    findings = [json.loads(ln) for ln in (runs / job / "findings.jsonl").read_text().splitlines() if ln.strip()]
    assert [(f["kind"], f["step"], f["action"]) for f in findings] == [("no_signal", 2, "delete")], findings
    assert all(r["critic/advantages/max"] == 0 and r["critic/advantages/min"] == 0 for r in rows(runs / job))
    gone = info.kubectl("get", "pytorchjob", job, "-n", ns, "-o", "name", check=False)
    assert "NotFound" in gone.stderr or not gone.stdout.strip(), (gone.stdout, gone.stderr)
