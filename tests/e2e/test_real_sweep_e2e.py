"""A real sweep (issue 29, item 5): `launcher sweep configs/grpo-exp3-cpu.yaml --grid rollout.n=2,4` through a Kueue
LocalQueue whose ClusterQueue admits one run at a time (the real nodes' CPU and memory as its quota), on the real
nodes: both members train for real (verl's trainer, the tiny model on CPU, 2 steps each), Kueue admits the second
only once the first finished, and the sweep report ranks them. Admission and quota are Kueue v0.17.0's own."""
from __future__ import annotations

import datetime as dt
import json

import pytest

import kueue_support as kq
import kwok_support as ks
import realnode as rn
from launcher_helpers import run_launcher

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
CONFIG = str(ks.REPO_ROOT / "configs" / "grpo-exp3-cpu.yaml")
CLUSTER_QUEUE = "grpo-real-sweep-e2e"
STEPS = 2


@pytest.fixture
def one_at_a_time(kube_cluster, namespace):
    """A LocalQueue `sweep` in the test namespace to a ClusterQueue that fits one grpo-exp3-cpu run (1500m CPU,
    12Gi) and not two."""
    rn.ensure_real_node(kube_cluster)
    kq.ensure_kueue()
    kq.real_cpu_cluster_queue(kube_cluster, CLUSTER_QUEUE, cpu="2", memory="20Gi")
    kq.local_queue(kube_cluster, namespace, name="sweep", cluster_queue=CLUSTER_QUEUE)
    yield "sweep"
    kq.delete_cluster_queue(kube_cluster, CLUSTER_QUEUE)


def _when(c: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))


def test_a_real_sweep_through_kueue_one_at_a_time_is_ranked(kube_cluster, namespace, one_at_a_time, tmp_path):
    from launcher.run.sweep import expand, parse_grid

    info, ns, runs = kube_cluster, namespace, tmp_path / "runs"
    sets = [f"trainer.total_training_steps={STEPS}", "trainer.total_epochs=1", f"scheduling.namespace={ns}",
            "run_policy.active_deadline_seconds=1200"]  # a hung member fails within 20 minutes
    grid = ["rollout.n=2,4"]
    sweep = expand(CONFIG, parse_grid(grid), [*sets, f"scheduling.queue={one_at_a_time}"])
    rc, out, err = run_launcher(["sweep", CONFIG, "--grid", grid[0], "--queue", one_at_a_time, "--follow",
                                 *[a for s in sets for a in ("--set", s)]], info, runs, timeout=2400)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert err.count("submitted PyTorchJob") == 2, err[-3000:]

    jobs = {j["metadata"]["name"]: j for j in json.loads(info.kubectl("get", "pytorchjobs", "-n", ns, "-o",
                                                                       "json").stdout)["items"]}
    spans = []
    for m in sweep.members:  # real training, every step, on the real nodes
        rows = [json.loads(x) for x in (runs / m.job / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), (m.job, rows)
        assert all("actor/pg_loss" in r and "critic/score/mean" in r for r in rows), m.job
        placed = json.loads((runs / m.job / "pods.json").read_text())["pods"]
        assert placed and all(p["simulated"] is False and p["node"] in rn.NODES for p in placed.values()), placed
        wl = kq.workload(info, ns, jobs[m.job]["metadata"]["uid"])
        assert wl["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE
        spans.append((_when(kq.condition(wl, "Admitted")), _when(kq.condition(wl, "Finished"))))
    (first_in, first_out), (second_in, second_out) = sorted(spans)
    assert second_in >= first_out, spans  # one at a time: the second was admitted once the first had finished

    home = runs / "sweeps" / sweep.name
    rep = json.loads((home / "sweep-report.json").read_text())
    assert rep["varied"] == ["rollout.n"] and rep["metric"] == "critic/score/mean"
    assert [r["rank"] for r in rep["runs"]] == [1, 2] and all(r["state"]["phase"] == "Succeeded" for r in rep["runs"])
    means = [r["metric"]["mean"] for r in rep["runs"]]
    assert means == sorted(means, reverse=True), rep["runs"]
    assert rep["simulated"] == [], rep["simulated"]  # real training: nothing simulated
    md = (home / "sweep.md").read_text()
    assert "`rollout.n`" in md and f"`{rep['best']['job']}`" in md and "Simulated trainer" not in md
