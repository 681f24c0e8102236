"""A followed run survives losing its pod on the local control plane: the pod evicted (Eviction API, as `kubectl
drain` does) and its node deleted mid-run. The training-operator recreates the PyTorchJob's pod (restartPolicy
OnFailure, from run_policy.backoff_limit=2: a lost pod is replaced; with Never it would fail the job), `submit
--follow` keeps following, metrics.jsonl holds every step once with the resumed attempt's values, and `status`
and the report show the restart.

Simulated trainer (KWOK): the pod runs no container. Each attempt's log is what the real entrypoint and verl
print: the entrypoint's attempt line, then verl's step lines (simlog), the resumed attempt starting after the
checkpoint it names. The test serves attempt 1's log for the pod, and attempt 2's once the old pod is gone and
before the replacement can be scheduled (its own KWOK nodes, tainted for this test only, are cordoned or
deleted), so each pod serves only its own attempt. The resume decision itself is proven on real verl
checkpoints in tests/verl/test_resume_verl.py; an eviction on a real container (replaced and followed; the smoke
workload, so it starts over rather than resuming) is tests/e2e/test_real_resume_e2e.py::
test_real_pod_evicted_mid_run_is_replaced_and_followed.
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import CONFIG, PY, REPO, expected_rows, rows, run_launcher, serve_run, verl_lines, wait_file_rows

pytestmark = pytest.mark.cluster
STEPS, LOST_AT, RESUME_FROM = 12, 7, 5  # attempt 1 logs steps 1..7, its last checkpoint is global_step_5
TAINT = "grpo.e2e/resume"


def _sets(ns: str, delay: str) -> list[str]:
    ann = json.dumps({ks.POD_COMPLETE_DELAY: delay})
    return [f"scheduling.namespace={ns}", f"trainer.total_training_steps={STEPS}", "trainer.save_freq=5",
            "run_policy.backoff_limit=2",  # restartPolicy OnFailure: a lost pod is replaced (Never fails the job)
            f"scheduling.pod_annotations={ann}", f"scheduling.node_selector={json.dumps({TAINT: ns})}",
            f"scheduling.tolerations={json.dumps([{'key': TAINT, 'operator': 'Exists', 'effect': 'NoSchedule'}])}"]


def _submit_args(ns: str, delay: str) -> list[str]:
    out = ["submit", CONFIG, "-n", ns, "--follow"]
    for s in _sets(ns, delay)[1:]:
        out += ["--set", s]
    return out


def _attempt_logs() -> tuple[list[str], list[str]]:
    """What the pod of attempt 1 (dies after step 7) and of attempt 2 (resumes at global_step_5) print."""
    from launcher.metrics import LogParser

    first = ["[entrypoint] role=single-node experiment=grpo-exp3 cpus=16 gpus_per_node=2",
             "[entrypoint] attempt 1: starting fresh (no checkpoint yet); steps lost: 0"]
    for ln in verl_lines(STEPS, seed=21):
        recs = LogParser().feed_lines([ln])
        if recs and recs[0].step > LOST_AT:
            break
        first.append(ln)
    second = ["[entrypoint] role=single-node experiment=grpo-exp3 cpus=16 gpus_per_node=2",
              f"[entrypoint] attempt 2: resuming from global_step_{RESUME_FROM}; steps lost: {LOST_AT - RESUME_FROM} "
              f"(an earlier attempt logged up to step {LOST_AT})"]
    for ln in verl_lines(STEPS, seed=22):
        recs = LogParser().feed_lines([ln])
        if recs and recs[0].step <= RESUME_FROM:
            continue
        second.append(ln)
    return first, second


def _expected() -> list[dict]:
    a, b = expected_rows(STEPS, seed=21), expected_rows(STEPS, seed=22)
    return a[:RESUME_FROM] + b[RESUME_FROM:]


def _node(core, name: str, ns: str, *, unschedulable: bool = False) -> None:
    from kubernetes import client

    gpu = {"cpu": "96", "memory": "1120Gi", "pods": "110", "nvidia.com/gpu": "8"}
    core.create_node(client.V1Node(
        metadata=client.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake",
                                                             "node.alpha.kubernetes.io/ttl": "0"},
                                     labels={"type": "kwok", "kubernetes.io/hostname": name, TAINT: ns,
                                             "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
        spec=client.V1NodeSpec(unschedulable=unschedulable,
                               taints=[client.V1Taint(key=TAINT, value=ns, effect="NoSchedule")]),
        status=client.V1NodeStatus(allocatable=gpu, capacity=gpu)))


def _delete_nodes(core, ns: str) -> None:
    for n in core.list_node(label_selector=f"{TAINT}={ns}").items:
        try:
            core.delete_node(n.metadata.name)
        except Exception:
            pass


def _pod(core, ns: str, name: str):
    from kubernetes.client.rest import ApiException

    try:
        return core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _repoint(info, ns: str, pod: str, lines: list[str]) -> None:
    served = serve_run(info, ns, pod, lines, initial=len(lines))
    assert served.path.exists()


class _Follow:
    """`submit --follow` in the background, its output in files (a pipe nobody reads would block it)."""

    def __init__(self, args: list[str], info, runs, tmp):
        import os
        import subprocess

        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(KUBECONFIG=str(info.kubeconfig), LAUNCHER_RUNS_DIR=str(runs), PYTHONUNBUFFERED="1",
                   PYTHONPATH=str(REPO / "src"))
        self.out, self.err = tmp / "follow.out", tmp / "follow.err"
        with open(self.out, "w") as o, open(self.err, "w") as e:
            self.proc = subprocess.Popen([PY, "-m", "launcher", *args], env=env, stdout=o, stderr=e, text=True)

    def wait(self, timeout: float) -> tuple[int, str]:
        try:
            self.proc.wait(timeout=timeout)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, self.err.read_text()


def _check_outcome(info, ns: str, runs, job: str, follow: _Follow, *, evicted_uid: str, timeout: float = 240) -> None:
    code, err = follow.wait(timeout)
    assert code == 0, err[-4000:]
    assert f"[master-0] [entrypoint] attempt 2: resuming from global_step_{RESUME_FROM}" in follow.out.read_text()
    run = runs / job
    got = rows(run)
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))  # every step once, in order
    assert got == _expected()  # steps 6..7 were re-logged by attempt 2: its values won
    meta = json.loads((run / "metrics.meta.json").read_text())
    assert sorted(r["step"] for r in meta["relogged"]) == [6, 7]
    assert all(evicted_uid not in meta["step_attempt"][str(s)] for s in range(6, STEPS + 1))
    from launcher.run.attempts import load, summarise

    att = summarise(load(run))
    assert [(a["action"], a["resumed_from"], a["first_step"], a["last_step"], a["steps_lost"]) for a in att] == [
        ("fresh", 0, 1, LOST_AT, 0), ("resume", RESUME_FROM, RESUME_FROM + 1, STEPS, LOST_AT - RESUME_FROM)]
    assert att[1]["time_lost_s"] is not None and att[1]["time_lost_s"] >= 0
    rc, sout, serr = run_launcher(["status", job, "-n", ns], info, runs)
    assert rc == 0, serr
    assert "attempts (2" in sout and f"resumed from global_step_{RESUME_FROM}" in sout and "steps lost 2" in sout
    rc, jout, _ = run_launcher(["status", job, "-n", ns, "-o", "json"], info, runs)
    assert rc == 0 and [a["resumed_from"] for a in json.loads(jout)["attempts"]] == [0, RESUME_FROM]
    rc, _, rerr = run_launcher(["report", str(run)], info, runs)
    assert rc == 0, rerr
    md = (run / "report.md").read_text()
    assert "Attempts and restarts" in md and f"global_step_{RESUME_FROM}" in md
    report = json.loads((run / "report.json").read_text())
    assert report["sections"]["attempts"]["restarts"] == 1


def _job(ns: str, delay: str) -> str:
    from launcher.spec.load import load_spec

    return load_spec(CONFIG, _sets(ns, delay)).job_name


def test_pod_evicted_mid_run_is_recreated_and_resumes(kube_cluster, kube_api, namespace, tmp_path):
    from kubernetes import client

    ns, runs, delay = namespace, tmp_path / "runs", "30s"
    core = client.CoreV1Api(kube_api)
    job = _job(ns, delay)
    pod = f"{job}-master-0"
    first, second = _attempt_logs()
    _node(core, f"kwok-resume-{ns[-6:]}", ns)
    try:
        _repoint(kube_cluster, ns, pod, first)
        proc = _Follow(_submit_args(ns, delay), kube_cluster, runs, tmp_path)
        wait_file_rows(runs / job, LOST_AT, timeout=90)
        old = _pod(core, ns, pod)
        uid = old.metadata.uid
        # as `kubectl drain`: cordon, then evict through the Eviction API
        core.patch_node(old.spec.node_name, {"spec": {"unschedulable": True}})
        core.create_namespaced_pod_eviction(pod, ns, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod, namespace=ns)))
        ks.wait_for(lambda: (p := _pod(core, ns, pod)) is None or p.metadata.uid != uid, 90, what="evicted pod gone")
        _repoint(kube_cluster, ns, pod, second)  # the replacement cannot be scheduled yet: it will serve attempt 2
        new = ks.wait_for(lambda: (p := _pod(core, ns, pod)) is not None and p.metadata.uid != uid and p, 90,
                          what="the operator's replacement pod")
        assert new.status.phase == "Pending"
        core.patch_node(old.spec.node_name, {"spec": {"unschedulable": False}})
        _check_outcome(kube_cluster, ns, runs, job, proc, evicted_uid=uid)
    finally:
        _delete_nodes(core, ns)


def test_node_deleted_mid_run_pod_comes_back_on_another_node(kube_cluster, kube_api, namespace, tmp_path):
    from kubernetes import client

    # KWOK would still "complete" a pod bound to a deleted node (no kubelet is needed to fake one): the pod's
    # run time must outlast the pod garbage collector's quarantine (40 s, checked every 20 s) by a margin.
    ns, runs, delay = namespace, tmp_path / "runs", "120s"
    core = client.CoreV1Api(kube_api)
    job = _job(ns, delay)
    pod = f"{job}-master-0"
    first, second = _attempt_logs()
    lost, spare = f"kwok-resume-a-{ns[-6:]}", f"kwok-resume-b-{ns[-6:]}"
    _node(core, lost, ns)
    try:
        _repoint(kube_cluster, ns, pod, first)
        proc = _Follow(_submit_args(ns, delay), kube_cluster, runs, tmp_path)
        wait_file_rows(runs / job, LOST_AT, timeout=90)
        old = _pod(core, ns, pod)
        uid = old.metadata.uid
        assert old.spec.node_name == lost
        core.delete_node(lost)
        # the pod garbage collector deletes pods bound to a node that no longer exists (after its quarantine)
        ks.wait_for(lambda: (p := _pod(core, ns, pod)) is None or p.metadata.uid != uid, 180,
                    what="pod of the deleted node garbage-collected")
        _repoint(kube_cluster, ns, pod, second)
        _node(core, spare, ns)  # capacity comes back (an autoscaler, a repaired node)
        seen: list = []

        def replaced():
            p = _pod(core, ns, pod)
            seen.append(None if p is None else (p.metadata.uid, p.spec.node_name, p.status.phase))
            return p if p is not None and p.metadata.uid != uid and p.spec.node_name else None

        try:
            new = ks.wait_for(replaced, 120, what="replacement pod scheduled")
        except TimeoutError as exc:
            raise AssertionError(f"old uid {uid}; pods seen: {sorted(set(map(str, seen)))}") from exc
        assert new.spec.node_name == spare
        _check_outcome(kube_cluster, ns, runs, job, proc, evicted_uid=uid, timeout=400)
    finally:
        _delete_nodes(core, ns)
