"""`runs/<job>/pods.json` (launcher.run.placement): the follower records where each pod ran, and `report` says
"simulated trainer" exactly when a pod ran on a KWOK fake node — checked through the real `LogFollower`
(against the in-memory FakeKube) and the real `launcher report`."""

from __future__ import annotations

import json
import threading

from kube_fakes import FakeKube, pod, pytorchjob
from launcher.run import placement
import simlog
from launcher.cli.main import main
from launcher.run.follow import LogFollower, record_node
from launcher.kube import jobs as J
from launcher.kube.client import ApiError
from launcher.run.dirs import RunDir

JOB = "exp-12345678"
POD = f"{JOB}-master-0"
# Node objects as hack/cluster/manifests/nodes.yaml and a real kubelet register them (trimmed).
KWOK_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {
    "name": "kwok-a100-0", "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok"}}}
REAL_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {
    "name": "grpo-node-0", "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
    "labels": {"kubernetes.io/hostname": "grpo-node-0"}}}


def _placed(name: str, node: str, **kw) -> dict:
    p = pod(name, JOB, **kw)
    p["spec"]["nodeName"] = node
    return p


def test_kwok_nodes_are_told_apart_by_annotation_or_label():
    assert placement.is_kwok_node(KWOK_NODE)
    assert placement.is_kwok_node({"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}}})
    assert placement.is_kwok_node({"metadata": {"labels": {"type": "kwok"}}})
    assert not placement.is_kwok_node(REAL_NODE)
    assert not placement.is_kwok_node({"metadata": {"annotations": {"kwok.x-k8s.io/node": "real"}}})
    assert not placement.is_kwok_node({})


def test_record_writes_each_pod_once_with_its_node_kind(tmp_path):
    fk = FakeKube()
    fk.put(KWOK_NODE)
    fk.put(REAL_NODE)
    record_node(fk, tmp_path, _placed("a", "kwok-a100-0"))
    record_node(fk, tmp_path, _placed("b", "grpo-node-0"))
    record_node(fk, tmp_path, _placed("c", "gone-node"))  # node not found: unknown, not guessed
    record_node(fk, tmp_path, _placed("b", "grpo-node-0"))  # recorded already on that node: unchanged
    record_node(fk, tmp_path, pod("unbound", JOB))  # no nodeName yet: nothing to record
    saved = json.loads((tmp_path / "pods.json").read_text())
    assert saved == {"pods": {
        "a": {"node": "kwok-a100-0", "simulated": True},
        "b": {"node": "grpo-node-0", "simulated": False},
        "c": {"node": "gone-node", "simulated": None},
    }}


def test_a_pod_created_again_on_another_node_names_both(tmp_path):
    fk = FakeKube()
    fk.put(KWOK_NODE)
    fk.put(REAL_NODE)
    fk.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "grpo-node-1"}})
    run = tmp_path
    assert record_node(fk, run, _placed("m", "grpo-node-1")) == {"node": "grpo-node-1", "simulated": False}
    # its node lost, the operator creates it again elsewhere: the console hears of the new node
    assert record_node(fk, run, _placed("m", "grpo-node-0")) == {
        "node": "grpo-node-0", "simulated": False, "moved_from": ["grpo-node-1"]}
    assert record_node(fk, run, _placed("m", "grpo-node-0")) is None
    # once on a KWOK fake, the pod's figures are partly simulated, wherever it ran later
    record_node(fk, run, _placed("m", "kwok-a100-0"))
    record_node(fk, run, _placed("m", "grpo-node-1"))
    assert placement.load(run)["m"] == {"node": "grpo-node-1", "simulated": True,
                                        "moved_from": ["grpo-node-1", "grpo-node-0", "kwok-a100-0"]}
    assert placement.summary(placement.load(run))["simulated"] is True


def test_record_survives_a_forbidden_node_read(tmp_path):
    class Forbidden(FakeKube):
        def get(self, res, name, *, namespace=None):
            if res.kind == "Node":
                raise ApiError(403, 'nodes "x" is forbidden', "get node x", self.server)
            return super().get(res, name, namespace=namespace)

    record_node(Forbidden(), tmp_path, _placed("a", "kwok-a100-0"))
    assert placement.load(tmp_path) == {"a": {"node": "kwok-a100-0", "simulated": None}}


def test_summary_says_simulated_only_when_a_pod_ran_on_kwok():
    fake = {"m": {"node": "kwok-a100-0", "simulated": True}}
    real = {"m": {"node": "grpo-node-0", "simulated": False}}
    unknown = {"m": {"node": "n", "simulated": None}}
    assert placement.summary(fake)["simulated"] is True
    assert placement.summary(fake)["headline"] == "simulated trainer (KWOK fake nodes; generated verl log)"
    assert "kwok-a100-0" in placement.summary(fake)["note"]
    assert placement.summary(real) == {"simulated": False, "headline": "real training", "note": None, "pods": real}
    assert placement.summary(real, tiny_cpu=True)["headline"] == "real training (tiny model on CPU)"
    assert placement.summary(fake, tiny_cpu=True)["headline"] == placement.SIMULATED_HEADLINE
    assert placement.summary(unknown)["simulated"] is None and placement.summary(unknown)["headline"] is None
    assert placement.summary(None)["simulated"] is None
    mixed = placement.summary({**fake, "w": {"node": "grpo-node-0", "simulated": False}})
    assert mixed["simulated"] is True and "Pod(s) w ran on real nodes" in mixed["note"]


def _follow_and_report(tmp_path, node: dict, notices: list | None = None, spec: str | None = None) -> tuple[dict, str]:
    """Follow a finished simulated run on `node` with the real LogFollower, then `launcher report` it."""
    fk = FakeKube()
    fk.put(node)
    fk.put(pytorchjob(JOB, conditions=(("Succeeded", "True"),)))
    fk.put(_placed(POD, node["metadata"]["name"], phase="Succeeded", state="terminated"))
    fk.append(POD, "pytorch", 0, [ln.rstrip("\n") for ln in simlog.generate(steps=4, seed=0)])
    run_dir = RunDir(tmp_path / JOB)
    if spec is not None:
        run_dir.ensure().spec.write_text(spec)
    ref = J.JobRef("pytorchjob", JOB, fk.get(J.JOB_RESOURCES["pytorchjob"], JOB))
    result: dict = {}
    on_notice = (notices if notices is not None else []).append
    t = threading.Thread(target=lambda: result.setdefault(
        "r", LogFollower(fk, ref, run_dir, poll_interval=0.05, read_timeout=2, on_notice=on_notice).run()),
        daemon=True)
    t.start()
    t.join(20)
    assert result["r"].state.succeeded and result["r"].rows == 4
    assert main(["report", str(run_dir.path), "--no-plots"]) == 0
    return json.loads((run_dir.path / "report.json").read_text()), (run_dir.path / "report.md").read_text()


def test_a_run_followed_on_a_kwok_node_is_reported_as_simulated(tmp_path):
    notices: list[str] = []
    doc, md = _follow_and_report(tmp_path, KWOK_NODE, notices)
    assert [n for n in notices if "node kwok-a100-0" in n] == [
        "[master-0] on KWOK fake node kwok-a100-0: Simulated trainer (KWOK fake nodes; generated verl log)"]
    assert json.loads((tmp_path / JOB / "pods.json").read_text())["pods"] == {
        POD: {"node": "kwok-a100-0", "simulated": True}}
    assert doc["execution"]["simulated"] is True
    assert md.splitlines()[0].startswith("# Simulated — GRPO run report: ")
    first = md.split("## Config")[0]  # said before anything else, not buried in a section
    assert "> **Simulated trainer (KWOK fake nodes; generated verl log).**" in first
    assert "kwok-a100-0" in first and "simlog" in first


def test_a_run_followed_on_a_real_node_is_not_called_simulated(tmp_path):
    doc, md = _follow_and_report(tmp_path, REAL_NODE)
    assert json.loads((tmp_path / JOB / "pods.json").read_text())["pods"] == {
        POD: {"node": "grpo-node-0", "simulated": False}}
    assert doc["execution"]["simulated"] is False
    assert "simulated" not in md.lower() and "kwok" not in md.lower()
    assert md.splitlines()[0].startswith("# Real training — GRPO run report: ")


def test_a_tiny_cpu_run_on_a_real_node_says_so_on_the_console_and_in_the_report(tmp_path):
    notices: list[str] = []
    spec = "name: t\nmodel: {path: 'builtin:tiny-qwen2'}\nresources: {gpus_per_node: 0}\n"
    doc, md = _follow_and_report(tmp_path, REAL_NODE, notices, spec=spec)
    assert "[master-0] on real node grpo-node-0: Real training (tiny model on CPU)" in notices
    assert doc["execution"]["headline"] == "real training (tiny model on CPU)"
    assert md.splitlines()[0].startswith("# Real training (tiny model on CPU) — GRPO run report: ")


def test_tiny_cpu_is_a_builtin_model_on_cpu_pods():
    cpu = {"model": {"path": "builtin:tiny-qwen2"}, "resources": {"gpus_per_node": 0}}
    assert placement.tiny_cpu(cpu)
    assert not placement.tiny_cpu({**cpu, "resources": {"gpus_per_node": 2}})
    assert not placement.tiny_cpu({**cpu, "model": {"path": "Qwen/Qwen2.5-3B-Instruct"}})
    assert not placement.tiny_cpu(None)
