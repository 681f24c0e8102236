"""Incidents (issue 31): the in-pod stack program on a live process, the files of an incident, the report's section,
and the watch session's `--on-stall restart` with its budget (tests/kube_fakes.FakeKube; the real cluster in
tests/e2e/test_real_incidents_e2e.py)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.run.watchdog import WatchdogConfig
from test_watchdog import sim_records  # tests/run is on sys.path (rootdir-less test modules)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "incidents" / "vllm-enginecore-stopped.json.gz"


class LocalPod:
    """`run_in_pod` on this machine: the program runs here, as the API server's exec would run it in the pod."""

    def run_in_pod(self, pod, argv, *, container=None, timeout=600):
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}  # py-spy
        proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=timeout, env=env)
        return proc.stdout, proc.stderr, proc.returncode


HANG = """
import time
def hang_here_for_the_test():
    print("ready", flush=True)
    time.sleep(3600)
hang_here_for_the_test()
"""


def test_the_stack_program_reads_a_stopped_python_process_without_running_it():
    from launcher.kube.stacks import capture_stacks

    child = subprocess.Popen([sys.executable, "-c", HANG], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGSTOP)
        capture = capture_stacks(LocalPod(), "pod-0")
        [me] = [p for p in capture["processes"] if p["pid"] == child.pid]
        assert me["state"] == "T" and me["ppid"] == os.getpid() and me["read"], me
        assert capture["py_spy"] and "error" not in me, me
        [main] = [t for t in me["threads"] if t["frames"]]
        assert [f["name"] for f in main["frames"]][:2] == ["hang_here_for_the_test", "<module>"], main["frames"]
        # still stopped: py-spy --nonblocking read its memory without attaching
        with open(f"/proc/{child.pid}/stat") as fh:
            assert fh.read().rsplit(")", 1)[1].split()[0] == "T"
    finally:
        child.kill()
        child.wait()


def test_the_stack_program_skips_ray_infrastructure():
    from launcher.kube.stacks import STACKS

    from launcher.kube.stacks import SKIPPED, SKIPPED_SCRIPTS

    # a command line that names Ray's log monitor (its argv after -c: the program's own arguments)
    child = subprocess.Popen([sys.executable, "-c", "import time\nprint('ready', flush=True)\ntime.sleep(3600)",
                              "ray/_private/log_monitor.py"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        out, _, code = LocalPod().run_in_pod("p", ["python3", "-c", STACKS, json.dumps(SKIPPED),
                                                   json.dumps(SKIPPED_SCRIPTS), "20"])
        assert code == 0
        [me] = [p for p in json.loads(out)["processes"] if p["pid"] == child.pid]
        assert me["read"] is False and "threads" not in me and "error" not in me, me
    finally:
        child.kill()
        child.wait()


def test_an_incident_written_and_read_back():
    from launcher.run.incidents import last_step, stacks_text

    capture = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    text = stacks_text(capture)
    assert "process 852 (parent 761, state T [stopped], rss 952 MiB): VLLM::EngineCore" in text
    assert "    EngineCoreProc._process_input_queue (vllm/v1/engine/core.py:1285)" in text
    rows = [{"step": 1, "timing_s/gen": 2.0, "x": 1}, {"step": 3, "timing_s/gen": 2.5, "timing_s/step": 3.1},
            {"step": 2, "timing_s/gen": 9.0}]
    assert last_step(rows) == {"step": 3, "timings_s": {"gen": 2.5, "step": 3.1}} and last_step([]) is None


def test_incident_files_status_lines_and_the_report_section(tmp_path):
    from launcher.report.incidents import incidents_section
    from launcher.run.incidents import describe, load_incidents, write_incident

    run = tmp_path / "j-1"
    record = {"time": "2026-12-04T18:18:42Z", "job": "j-1", "action": "restart",
              "verdict": {"class": "rollout", "why": "process stopped: 852 VLLM::EngineCore in x | y"},
              "last_step": {"step": 12, "timings_s": {"gen": 2.0}}}
    write_incident(run / "incidents" / "20261204T181842Z", record, {"m-0": json.loads(gzip.decompress(FIXTURE.read_bytes()))},
                   {"m-0": "line 1\n"})
    assert (run / "incidents" / "20261204T181842Z" / "stacks" / "m-0.txt").read_text().startswith("py-spy: ")
    assert (run / "incidents" / "20261204T181842Z" / "logs" / "m-0.log").read_text() == "line 1\n"
    [inc] = load_incidents(run)
    assert inc["id"] == "20261204T181842Z" and inc["verdict"]["class"] == "rollout"
    assert describe(inc) == ("20261204T181842Z: stall after step 12, rollout (process stopped: 852 VLLM::EngineCore "
                             "in x | y); restart")
    section = incidents_section(run)
    assert section.title == "Incidents"
    assert "| `20261204T181842Z` | 12 | rollout | process stopped: 852 VLLM::EngineCore in x \\| y | restart |" in \
        section.markdown
    assert incidents_section(tmp_path / "none") is None


# --- the watch session: restart with a budget ---------------------------------------------------------------------


class _Clock:
    t = 0.0

    def __call__(self):
        return self.t


def _session(tmp_path, kube, *, on_stall="restart", max_restarts=1):
    from kube_fakes import pod, pytorchjob

    from launcher.cli.watchdog import WatchSession
    from launcher.kube import jobs as J
    from launcher.run.dirs import RunDir
    from launcher.run.incidents import write_incident

    kube.put(pytorchjob("j-1"))
    kube.put(pod("j-1-master-0", "j-1"))
    ref = J.JobRef("pytorchjob", "j-1", kube.get(J.JOB_RESOURCES["pytorchjob"], "j-1"))
    captured = []

    def capture(kube_, ref_, run_dir, finding, *, action, restarts, budget):
        # the capture's own parts are tested above and on the real cluster; this one records how it was called
        captured.append((finding.key, action, restarts, budget))
        d = run_dir.incidents / f"2026120{len(captured)}T000000Z"
        rec = {"action": action, "verdict": {"class": "rollout", "why": "w"}, "last_step": {"step": finding.step}}
        write_incident(d, rec, {}, {})
        return {**rec, "id": d.name, "path": str(d)}

    clock = _Clock()
    s = WatchSession(kube, ref, RunDir(tmp_path / "j-1").ensure(), WatchdogConfig(stall_factor=2.0, stall_min_s=0.0),
                     on_stall=on_stall, max_restarts=max_restarts, clock=clock, capture=capture)
    return s, clock, captured


def _stall(session, clock):
    from launcher.kube.jobs import JobState

    clock.t += 10 * session.dog.stall_bound() + 1
    session.status(JobState("Running", False, False, ""), [])


def test_restart_deletes_the_pods_then_gives_up_when_the_budget_is_spent(tmp_path):
    from kube_fakes import FakeKube, pod

    kube = FakeKube()
    session, clock, captured = _session(tmp_path, kube, max_restarts=1)
    session.records(sim_records(steps=4, seed=7))
    _stall(session, clock)
    assert captured == [("stall@4", "restart", 0, 1)]
    assert kube.deleted == [("Pod", "j-1-master-0")] and session.deleted_reason is None  # the job is kept
    # the operator starts the pod again; the new attempt re-logs step 4 (resumed from an older checkpoint) and stalls
    kube.put(pod("j-1-master-0", "j-1", uid="second"))
    _stall(session, clock)
    assert captured[1:] == [], "a restarted attempt's clock starts at its first step"
    session.records(sim_records(steps=4, seed=7)[-1:])
    _stall(session, clock)
    assert captured[1:] == [("stall@4#1", "give_up", 1, 1)]
    assert ("PyTorchJob", "j-1") in kube.deleted
    assert session.deleted_by == "--on-stall restart, budget spent"
    assert session.deleted_reason.startswith("stalled 2 time(s), gave up after 1 restart(s) (max 1): incidents ")
    assert all(str(tmp_path / "j-1" / "incidents" / d) in session.deleted_reason
               for d in ("20261201T000000Z", "20261202T000000Z"))
    rows = [json.loads(x) for x in (tmp_path / "j-1" / "findings.jsonl").read_text().splitlines()]
    assert [(r["key"], r["action"], r["incident"]) for r in rows] == [
        ("stall@4", "restart", "20261201T000000Z"), ("stall@4#1", "delete", "20261202T000000Z")]


def test_the_restart_count_survives_a_new_follower(tmp_path):
    """The budget counts the incidents on disk: a follower attached after a restart does not start from zero."""
    from kube_fakes import FakeKube

    session, clock, _ = _session(tmp_path, FakeKube(), max_restarts=1)
    session.records(sim_records(steps=3, seed=2))
    _stall(session, clock)
    again, clock2, captured = _session(tmp_path, FakeKube(), max_restarts=1)
    assert again.restarts == 1
    again.records(sim_records(steps=5, seed=2)[3:])
    _stall(again, clock2)
    assert [c[1] for c in captured] == ["give_up"]


def test_report_and_delete_capture_an_incident_too(tmp_path):
    from kube_fakes import FakeKube

    for action in ("report", "delete"):
        kube = FakeKube()
        session, clock, captured = _session(tmp_path / action, kube, on_stall=action)
        session.records(sim_records(steps=3, seed=1))
        _stall(session, clock)
        assert [c[1] for c in captured] == [action]
        assert (("PyTorchJob", "j-1") in kube.deleted) == (action == "delete")
        assert ("Pod", "j-1-master-0") not in kube.deleted


@pytest.mark.parametrize("backend, policies, expected", [
    ("rayjob", ["Never"], "--on-stall: expected report or delete for backends rayjob and trainjob"),
    ("trainjob", [], "--on-stall: expected report or delete for backends rayjob and trainjob"),
    ("pytorchjob", ["Never"], "--on-stall restart: run_policy.backoff_limit expected at least 1"),
])
def test_restart_is_refused_where_deleted_pods_would_not_resume(backend, policies, expected):
    import argparse

    from launcher.cli.watchdog import stall_policy
    from launcher.errors import BadInput
    from launcher.spec.model import HealthSpec

    args = argparse.Namespace(on_stall="restart", max_restarts=None)
    with pytest.raises(BadInput) as e:
        stall_policy(args, HealthSpec(), backend, policies)
    assert str(e.value).startswith(expected), str(e.value)
    assert stall_policy(args, HealthSpec(), "pytorchjob", ["OnFailure"]) == ("restart", 2)
    spec_restart = HealthSpec.model_validate({"stall": {"action": "restart", "max_restarts": 4}})
    assert stall_policy(argparse.Namespace(on_stall=None, max_restarts=None), spec_restart, "pytorchjob",
                        ["OnFailure"]) == ("restart", 4)
    assert stall_policy(argparse.Namespace(on_stall="report", max_restarts=0), spec_restart, "rayjob",
                        []) == ("report", 0)


def test_submit_on_stall_restart_without_retries_exits_2_before_any_cluster_call(tmp_path, capsys, monkeypatch):
    from launcher.cli.main import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    repo = Path(__file__).parents[2]
    assert main(["submit", str(repo / "configs" / "grpo-exp3-cpu.yaml"), "--follow", "--on-stall", "restart"]) == 2
    err = capsys.readouterr().err
    assert "--on-stall restart: run_policy.backoff_limit expected at least 1" in err and "kubeconfig" not in err


def test_the_spec_rules_for_health_stall_restart():
    from launcher.spec.load import load_spec
    from launcher.errors import BadInput

    repo = Path(__file__).parents[2]
    base = str(repo / "configs" / "grpo-exp3-cpu.yaml")
    ok = load_spec(base, ["health.stall.action=restart", "run_policy.backoff_limit=2"])
    assert ok.health.stall.action == "restart"
    for sets, field in ((["health.stall.action=restart"], "run_policy.backoff_limit"),
                        (["health.stall.action=restart", "run_policy.backoff_limit=2", "backend=rayjob"],
                         "health.stall.action")):
        with pytest.raises(BadInput) as e:
            load_spec(base, sets)
        assert field in str(e.value), str(e.value)


def test_an_exec_that_cannot_run_is_recorded_in_the_incident_never_raised(tmp_path):
    """Seen on KWOK fake pods (no container to exec in): the client's exec session reports a failure message where an
    exit status belongs; the incident keeps it as that pod's error and the follow goes on."""
    from kube_fakes import FakeKube, pod, pytorchjob

    from launcher.cli.incident import capture_incident
    from launcher.errors import ClusterError
    from launcher.kube import jobs as J
    from launcher.kube.pod_exec import finish
    from launcher.run.dirs import RunDir
    from launcher.run.watchdog import Finding

    class FailedSession:
        def is_open(self):
            return False

        def peek_stdout(self):
            return False

        peek_stderr = peek_stdout

        @property
        def returncode(self):
            return int("Internal error occurred: no exec found for container")

    with pytest.raises(ClusterError, match="exec failed: Internal error occurred: no exec found for container"):
        finish(FailedSession(), 5)

    class NoExec(FakeKube):
        def run_in_pod(self, *a, **kw):
            return finish(FailedSession(), 5)

    kube = NoExec()
    kube.put(pytorchjob("j-1"))
    kube.put(pod("j-1-master-0", "j-1"))
    ref = J.JobRef("pytorchjob", "j-1", kube.get(J.JOB_RESOURCES["pytorchjob"], "j-1"))
    inc = capture_incident(kube, ref, RunDir(tmp_path / "j-1").ensure(), Finding("stall", "stall@3", 3, "m"),
                           action="report")
    assert inc["stack_errors"] == {"j-1-master-0": "exec failed: Internal error occurred: no exec found for container"}
    assert inc["verdict"]["class"] == "unknown" and (tmp_path / "j-1" / "incidents" / inc["id"] / "incident.json").exists()
