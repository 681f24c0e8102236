"""Resume, the watchdog and the health rules judged on real verl training (grpo-exp3-cpu, the real nodes).

- The trainer container killed from the node (its processes, SIGKILL, not an API call) after verl wrote the
  global_step_5 checkpoint: the container restarts in place, the entrypoint picks global_step_5, verl resumes
  there and the run completes; attempts.json shows the resume point, metrics.jsonl holds each step once with the
  resumed attempt's values, and verl's own file logger agrees. The same run logs through verl's own trackers:
  MLflow (a real server the pods reach at the host's bridge address) holds one run across the resume whose last
  value per step is metrics.jsonl's, TensorBoard's reader gives the same from verl's event files on the volume, and
  `launcher export` completes that MLflow run instead of making a second.
- (A stall on real training, its incident and the run's end: tests/e2e/test_real_incidents_e2e.py.)
- A reward file that always returns 0 (no learning signal): the `health.no_signal` rule with action `stop` ends the
  run with exit 1 and the reason.
"""

from __future__ import annotations

import json
import math
import re
import uuid

import pytest
from mlflow import MlflowClient
from tensorboard.backend.event_processing import event_accumulator as ea

import kwok_support as ks
import realnode as rn
from launcher.export.mlflow_export import mlflow_key
from launcher_helpers import rows, run_launcher
from mlflow_server import mlflow_server
from real_runs import CONFIG, Following, check_resumed, checkpointed, logged_steps, master, sets_for
from real_runs import real_node, volume  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_trainer_killed_after_a_checkpoint_resumes_from_it_and_completes(real_node, namespace, volume, tmp_path):
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    steps, save = 12, 5  # latest_checkpointed_iteration stays 5 until step 10: time to see step 6 and kill
    with mlflow_server(tmp_path / "mlflow", host=rn.bridge_address()) as uri:
        # verl's own trackers, from inside the pods: MLflow (a real server, SQLite) and TensorBoard (the volume)
        experiment = f"real-resume-{uuid.uuid4().hex[:8]}"
        sets = sets_for(steps, f"trainer.save_freq={save}", "run_policy.backoff_limit=2",  # a restart is allowed
                        "tracking.mlflow.enabled=true", f"tracking.mlflow.tracking_uri={uri}",
                        f"tracking.mlflow.experiment={experiment}", "tracking.tensorboard.enabled=true")
        spec = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets])
        follower = Following(info, ns, runs, sets)

        with follower:
            # verl saves a step's checkpoint before it logs the step; the kill comes a step after both, so the
            # resumed attempt must redo a step it had logged (check_resumed: at least 1 lost, at most save_freq)
            ks.wait_for(lambda: checkpointed(volume, save) and save + 1 in logged_steps(runs / spec.job_name),
                        timeout=900, interval=1, what=f"verl's global_step_{save} checkpoint and step {save + 1}'s line")
            rn.kill_container(master(info, ns))  # every process of the trainer, from the node
        rc, err = follower.wait(timeout=1200)
        assert rc == 0, err[-4000:]
        run = runs / spec.job_name

        mine, raw = check_resumed(run, volume, steps, save, lost=1)

        # the main metrics: every numeric key verl logged on every step
        main = sorted({k for r in mine for k, v in r.items() if k != "step" and finite(v)})
        assert {"critic/score/mean", "actor/entropy", "actor/pg_loss", "timing_s/step"} <= set(main), main
        expect = {k: {r["step"]: float(r[k]) for r in mine if finite(r.get(k))} for k in main}

        # MLflow: both attempts logged to ONE run (the resumed one attached to it); each step's last value, by
        # MLflow's own timestamps, is the launcher's
        client = MlflowClient(tracking_uri=uri)
        found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
        assert len(found) == 1, [(r.info.run_id, r.info.run_name) for r in found]
        run_id = found[0].info.run_id
        assert found[0].data.tags["grpo.launcher.io/job"] == spec.job_name
        assert re.search(rf"mlflow: run {run_id} \(recorded\)", raw), raw[-3000:]  # attempt 2 reused the record
        before = {}
        for key in main:
            history = client.get_metric_history(run_id, mlflow_key(key))
            last = {m.step: m.value for m in sorted(history, key=lambda m: (m.timestamp, m.step))}
            assert last.keys() == expect[key].keys(), (key, sorted(last), sorted(expect[key]))
            for step, value in expect[key].items():
                assert math.isclose(last[step], value, rel_tol=1e-6, abs_tol=1e-9), (key, step, last[step], value)
            before[key] = sorted((m.step, m.timestamp, m.value) for m in history)

        # TensorBoard: verl's event files on the run's volume (one per attempt), read with TensorBoard's reader,
        # which drops an attempt's steps that the next one wrote again
        tb_dirs = [d for d in volume.glob("checkpoints/**/tensorboard") if d.is_dir()]
        assert len(tb_dirs) == 1 and len(list(tb_dirs[0].glob("events.out.tfevents.*"))) == 2, tb_dirs
        acc = ea.EventAccumulator(str(tb_dirs[0]), size_guidance={ea.SCALARS: 0})
        acc.Reload()
        for key in main:
            events = {e.step: e.value for e in acc.Scalars(key)}
            assert events.keys() == expect[key].keys(), (key, sorted(events), sorted(expect[key]))
            for step, value in expect[key].items():  # event files hold float32
                assert math.isclose(events[step], value, rel_tol=1e-6, abs_tol=1e-6), (key, step, events[step], value)

        # `launcher export` finds the pod's run and completes it (the report's figures) instead of making a second
        rc, out, err = run_launcher(["export", str(run), "--mlflow", uri, "--mlflow-experiment", experiment,
                                     "-o", "json"], info, runs, timeout=300)
        assert rc == 0, err
        sent = json.loads(out)["mlflow"]
        assert sent["run_id"] == run_id and sent["created"] is False, sent
        assert len(client.search_runs([found[0].info.experiment_id])) == 1
        assert any(k.startswith("report/") for k in client.get_run(run_id).data.metrics)
        for key in main:  # no step sent again
            assert sorted((m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, mlflow_key(key))) \
                == before[key], key


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
