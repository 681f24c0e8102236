"""`.ci/run`'s closing table (hack/ci/times.py, hack/ci/timed.sh) and the real-run ledger's reading side
(tests/real_run_ledger.py): what CI's log shows of where its time went."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import real_run_ledger as ledger

ROOT = Path(__file__).resolve().parents[1]


def _times(*args: str) -> str:
    return subprocess.run([sys.executable, str(ROOT / "hack" / "ci" / "times.py"), *args], capture_output=True,
                          text=True, check=True, timeout=60).stdout


def test_timed_records_the_lane_its_cpu_and_keeps_its_exit_code(tmp_path):
    """The lane's CPU time is its processes' own (a grandchild's included), not the wall time: a child that spins
    for 1 CPU-second beside one that sleeps 3 s."""
    out = tmp_path / "t.jsonl"
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
    p = subprocess.run([str(ROOT / "hack" / "ci" / "timed.sh"), "test", "unit", "bash", "-c",
                        f"{sys.executable} -c '{spin}' & sleep 3; wait; exit 3"],
                       env={**os.environ, "GRPO_TIMINGS_FILE": str(out)}, timeout=60)
    assert p.returncode == 3
    (line,) = out.read_text().splitlines()
    rec = json.loads(line)
    assert (rec["phase"], rec["lane"], rec["rc"]) == ("test", "unit", 3) and rec["seconds"] >= 0
    # the spin's CPU second (plus interpreter start-ups), less than the 3 s the lane waited: CPU, not wall time
    assert 1.0 <= rec["cpu_seconds"] < rec["seconds"], rec


def test_the_table_names_each_lane_the_total_and_every_real_run(tmp_path):
    timings, runs = tmp_path / "t.jsonl", tmp_path / "r.jsonl"
    timings.write_text(json.dumps({"phase": "installs", "lane": "image-cpu", "seconds": 125.0, "rc": 0}) + "\n"
                       + json.dumps({"phase": "test", "lane": "unit", "seconds": 900.0, "rc": 0,
                                     "cpu_seconds": 1234.0}) + "\n"
                       + json.dumps({"phase": "test", "lane": "cluster-shared", "seconds": 61.0, "rc": 2}) + "\n"
                       + '{"phase": "cut')  # a writer killed mid-line
    runs.write_text(json.dumps({"job": "grpo-exp3-cpu-abc", "test": "t::a", "seconds": 300.0, "steps": 25}) + "\n"
                    + json.dumps({"job": "grpo-exp3-cpu-def", "test": "t::b", "seconds": 90.0, "steps": 3}) + "\n")
    out = _times("--total", "4000", "--caches", "warm", "--timings", str(timings), "--real-runs", str(runs))
    assert "66 min 40 s in all (4000 s of CI's 5400), caches warm" in out
    assert "image-cpu" in out and "2 min 05 s" in out and "exit 2" in out
    (unit,) = [x for x in out.splitlines() if " unit " in x]
    assert "15 min 00 s" in unit and "20 min 34 s" in unit, unit  # its wall time and its CPU time
    assert "real verl runs: 2, 6 min 30 s of run time" in out
    lines = out.splitlines()
    assert lines.index(next(x for x in lines if "grpo-exp3-cpu-abc" in x)) < lines.index(
        next(x for x in lines if "grpo-exp3-cpu-def" in x))  # longest first


def test_no_files_yet_is_still_a_table(tmp_path):
    out = _times("--total", "5", "--timings", str(tmp_path / "none"), "--real-runs", str(tmp_path / "none"))
    assert "real verl runs: 0 recorded" in out


def test_the_ledger_reads_one_session_and_sums_its_runs(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps({"job": j, "test": "t", "seconds": s, "steps": 3, "session": sess}) + "\n"
                            for j, s, sess in (("a", 60.0, "one"), ("b", 30.0, "two"), ("c", 120.0, "one"))))
    mine = ledger.read(path, "one")
    assert [r["job"] for r in mine] == ["a", "c"]
    lines = ledger.summary(mine)
    assert lines[0] == "real verl runs: 2, 3.0 min of run time in all"
    assert " c " in lines[1] and " a " in lines[2]
    assert ledger.summary([]) == ["real verl runs: 0"]


def test_the_ledger_counts_verl_step_lines_not_the_smoke_workloads():
    from launcher.entrypoint.smoke import metric_line

    verl = (ROOT / "tests" / "fixtures" / "verl_notes_5_4_line.txt").read_text().strip()
    smoke = metric_line(1, {"smoke/allreduce_ms": 1.5, "smoke/world_size": 2, "timing_s/step": 0.1})
    assert ledger._steps(f"(TaskRunner pid=7) {verl}\nnoise\n") == {int(verl.split(" - ")[0].split(":")[1])}
    assert ledger._steps(f"{smoke}\n{metric_line(2, {'smoke/ray_task_ms': 3.0})}\n") == set()


def test_the_ledger_reads_a_deleted_runs_directory(tmp_path):
    """A run the test deleted (the watchdog's stop, doctor's clean-up) is counted from its run directory: real nodes
    from pods.json, verl's step lines from the saved logs, the time from the attempts' first and last lines."""
    verl = (ROOT / "tests" / "fixtures" / "verl_notes_5_4_line.txt").read_text().strip()

    def run_dir(job: str, simulated: bool, log: str) -> None:
        d = tmp_path / "runs" / job
        (d / "logs").mkdir(parents=True)
        (d / "logs" / f"{job}-master-0.log").write_text(f"[entrypoint] role=master\n{log}\n")
        (d / "pods.json").write_text(json.dumps({"pods": {f"{job}-master-0": {"node": "n", "simulated": simulated}}}))
        (d / "attempts.json").write_text(json.dumps({"format": 1, "streams": {
            "a": {"pod": f"{job}-master-0", "first_ns": 10 * 10**9, "last_ns": 100 * 10**9},
            "b": {"pod": f"{job}-master-0", "first_ns": 120 * 10**9, "last_ns": 250 * 10**9}}}))

    run_dir("real-1", False, f"(TaskRunner pid=7) {verl}")
    run_dir("kwok-1", True, verl)          # a KWOK pod's generated log is no real run
    run_dir("silent-1", False, "no step")  # nor a real pod that never reached a step
    run_dir("live-1", False, verl)         # nor one already read from its pods
    (found,) = ledger.saved_runs(tmp_path, "ns", {"live-1"})
    assert found == {"job": "real-1", "namespace": "ns", "pods": 1, "nodes": ["n"], "steps": 1, "seconds": 240.0,
                     "from": "run directory"}, found
