"""`launcher sweep` end to end: a 2x2 grid (rollout.n x data.max_response_length, the exp3 -> exp4 axes) through
a real Kueue (v0.17.0) LocalQueue whose ClusterQueue admits two runs at a time, on the local control plane.

The pods run on KWOK fake GPU nodes (simulated trainer): each serves a simlog verl log of its own shape (n and
max response length) and completes after a delay. Admission, quota, the jobs and the log streams are real; the
sweep is submitted, followed in one process, reported and ranked; a second run of the same sweep attaches.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

import kueue_support as kq
import kwok_support as ks
from launcher_helpers import CONFIG, cri, run_launcher

pytestmark = pytest.mark.cluster
STEPS = 6
CLUSTER_QUEUE = "grpo-sweep-e2e"
GRID = ["--grid", "rollout.n=2,4", "--grid", "data.max_response_length=256,512"]


@pytest.fixture
def sweep_queue(kube_cluster, namespace):
    """A ClusterQueue of 4 GPUs (each run asks for 2: two at a time) and a LocalQueue to it in the test namespace;
    its own ClusterQueue, so the Kueue tests' grpo-a100 quota is not shared."""
    kq.ensure_kueue()
    kq.cluster_queue(kube_cluster, CLUSTER_QUEUE, gpus=4)
    kq.local_queue(kube_cluster, namespace, name="sweep", cluster_queue=CLUSTER_QUEUE)
    yield "sweep"
    kq.delete_cluster_queue(kube_cluster, CLUSTER_QUEUE)


def _sets(ns: str) -> list[str]:
    ann = json.dumps({ks.POD_COMPLETE_DELAY: "10s"})
    return [f"trainer.total_training_steps={STEPS}", f"scheduling.pod_annotations={ann}",
            f"scheduling.namespace={ns}"]


def _argv(ns: str, queue: str) -> list[str]:
    return ["sweep", CONFIG, *GRID, "--queue", queue, "--follow",
            *[a for s in _sets(ns) for a in ("--set", s)]]


def _jobs(info, ns) -> dict[str, dict]:
    out = info.kubectl("get", "pytorchjobs", "-n", ns, "-o", "json").stdout
    return {j["metadata"]["name"]: j for j in json.loads(out)["items"]}


def _when(c: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))


def test_sweep_2x2_through_kueue_two_at_a_time_then_attach(kube_cluster, namespace, sweep_queue, tmp_path):
    import simlog
    from launcher.run.sweep import expand, parse_grid

    info, ns, runs = kube_cluster, namespace, tmp_path / "runs"
    sweep = expand(CONFIG, parse_grid(GRID[1::2]), [*_sets(ns), f"scheduling.queue={sweep_queue}"])
    assert len({m.job for m in sweep.members}) == 4
    for i, m in enumerate(sweep.members):
        n, length = m.params["rollout.n"], m.params["data.max_response_length"]
        lines = [ln.rstrip("\n") for ln in simlog.generate(steps=STEPS, n=n, max_response_length=length, seed=i)]
        ks.serve_logs(info, ns, f"{m.job}-master-0", cri(lines))

    rc, out, err = run_launcher(_argv(ns, sweep_queue), info, runs, timeout=420)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert err.count("submitted PyTorchJob") == 4 and "attached" not in err, err[-3000:]

    # all four ran to completion, each in its own run directory, with every step
    jobs = _jobs(info, ns)
    assert set(jobs) == {m.job for m in sweep.members}
    for m in sweep.members:
        assert len((runs / m.job / "metrics.jsonl").read_text().splitlines()) == STEPS, m.job
        assert jobs[m.job]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == sweep_queue

    # Kueue admitted at most two at a time: a third was admitted only when one had finished
    spans = []
    for m in sweep.members:
        wl = kq.workload(info, ns, jobs[m.job]["metadata"]["uid"])
        admitted, finished = kq.condition(wl, "Admitted"), kq.condition(wl, "Finished")
        assert finished.get("status") == "True", wl["status"]
        assert wl["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE
        assert admitted.get("status") == "True", wl["status"]
        spans.append((_when(admitted), _when(finished)))
    starts, ends = sorted(s for s, _ in spans), sorted(e for _, e in spans)
    assert starts[2] >= ends[0], (starts, ends)  # the third admission waited for the first finish
    for t in starts:
        assert sum(1 for s, e in spans if s <= t < e) <= 2, spans

    # the sweep's own file and report: the changed parameters named, the runs ranked by score with an interval
    home = runs / "sweeps" / sweep.name
    doc = json.loads((home / "sweep.json").read_text())
    assert doc["varied"] == ["rollout.n", "data.max_response_length"]
    assert [m["job"] for m in doc["members"]] == [m.job for m in sweep.members]
    rep = json.loads((home / "sweep-report.json").read_text())
    assert rep["varied"] == ["rollout.n", "data.max_response_length"] and rep["metric"] == "critic/score/mean"
    assert set(rep["config_diff"]) >= {"rollout.n", "data.max_response_length"}
    means = [r["metric"]["mean"] for r in rep["runs"]]
    assert [r["rank"] for r in rep["runs"]] == [1, 2, 3, 4] and means == sorted(means, reverse=True)
    best_job = rep["best"]["job"]
    expected_best = max(sweep.members, key=lambda m: _steady_score(runs / m.job)).job
    assert best_job == expected_best and rep["best"]["ci95"][0] <= rep["best"]["mean"] <= rep["best"]["ci95"][1]
    assert all(r["state"]["phase"] == "Succeeded" for r in rep["runs"])
    md = (home / "sweep.md").read_text()
    assert sorted(rep["simulated"]) == sorted(m.job for m in sweep.members) and "Simulated trainer" in md
    assert "`rollout.n`" in md and "`data.max_response_length`" in md and f"`{best_job}`" in md
    assert (home / "compare_metrics.png").stat().st_size > 10_000
    assert "ranked by critic/score/mean" in out

    # the same sweep again: it attaches to the four runs (same jobs, same uids), creates nothing, reports again
    uids = {name: j["metadata"]["uid"] for name, j in jobs.items()}
    (home / "sweep-report.json").unlink()
    rc, out, err = run_launcher(_argv(ns, sweep_queue), info, runs, timeout=240)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert err.count("attached to PyTorchJob") == 4 and "submitted" not in err, err[-3000:]
    assert {name: j["metadata"]["uid"] for name, j in _jobs(info, ns).items()} == uids
    for m in sweep.members:  # the re-follow re-read the finished logs without duplicating a step
        assert len((runs / m.job / "metrics.jsonl").read_text().splitlines()) == STEPS, m.job
    assert json.loads((home / "sweep-report.json").read_text())["best"]["job"] == best_job


def _steady_score(run) -> float:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    vals = [r["critic/score/mean"] for r in sorted(rows, key=lambda r: r["step"]) if r["step"] > 0][1:]
    return sum(vals) / len(vals)


def test_sweep_max_parallel_one_submits_the_next_when_one_finishes(kube_cluster, namespace, tmp_path):
    """Without a queue, --max-parallel 1: the second run is created only after the first one finished."""
    import simlog
    from launcher.run.sweep import expand, parse_grid

    info, ns, runs = kube_cluster, namespace, tmp_path / "runs"
    grid = ["--grid", "rollout.n=2,4"]
    sweep = expand(CONFIG, parse_grid(grid[1::2]), _sets(ns))
    for i, m in enumerate(sweep.members):
        lines = [ln.rstrip("\n") for ln in simlog.generate(steps=STEPS, n=m.params["rollout.n"], seed=i)]
        ks.serve_logs(info, ns, f"{m.job}-master-0", cri(lines))
    argv = ["sweep", CONFIG, *grid, "--max-parallel", "1", *[a for s in _sets(ns) for a in ("--set", s)]]
    rc, out, err = run_launcher(argv, info, runs, timeout=300)
    assert rc == 0, out[-3000:] + err[-3000:]
    jobs = _jobs(info, ns)
    first, second = (jobs[m.job] for m in sweep.members)
    done = next(c for c in first["status"]["conditions"] if c["type"] == "Succeeded")
    created = dt.datetime.fromisoformat(second["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    assert created >= _when(done), (done, second["metadata"]["creationTimestamp"])
    for m in sweep.members:
        assert len((runs / m.job / "metrics.jsonl").read_text().splitlines()) == STEPS, m.job
    rep = json.loads((runs / "sweeps" / sweep.name / "sweep-report.json").read_text())
    assert rep["varied"] == ["rollout.n"] and [r["rank"] for r in rep["runs"]] == [1, 2]
