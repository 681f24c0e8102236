"""End-to-end with the real Kueue (v0.17.0, hack/cluster/kueue.sh) on the local control plane (KWOK GPU nodes):
quota (two experiments against a ClusterQueue that fits one), gang admission of a 2-node job (a TrainJob too, through
Kueue's trainer.kubeflow.org/trainjob integration), pre-emption by
priority; `launcher status`, `list` and `wait` through queueing. Pods run on KWOK fake nodes (simulated
trainer); admission, quota and pre-emption are Kueue's own."""
from __future__ import annotations

import datetime as dt
import json
import time

import pytest

import kueue_support as kq
import kwok_support as ks
from launcher_helpers import job_name, launcher, run_launcher, submit_args

pytestmark = pytest.mark.cluster
QUEUE = ("scheduling.queue=" + kq.LOCAL_QUEUE,)


@pytest.fixture
def queue_ns(kube_cluster, namespace):
    kq.ensure_kueue()
    kq.local_queue(kube_cluster, namespace)
    return namespace


def _sets(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def _submit(info, ns, runs, steps, delay, *sets):
    rc, out, err = run_launcher(submit_args(ns, steps, delay, "--new", *_sets(*QUEUE, *sets)), info, runs)
    assert rc == 0, out + err
    return job_name(ns, steps, delay, *QUEUE, *sets)


def _status(info, ns, runs, name) -> dict:
    rc, out, err = run_launcher(["status", name, "-n", ns, "-o", "json"], info, runs)
    assert rc == 0, out + err
    return json.loads(out)


def _uid(info, ns, kind, name) -> str:
    return info.kubectl("get", kind, name, "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout.strip()


def _when(c: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))


def _pods(info, ns, job) -> list[str]:
    return info.kubectl("get", "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={job}", "-o", "name").stdout.split()


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_second_experiment_waits_for_quota_then_runs(kube_cluster, queue_ns, tmp_path, backend):
    info, ns, runs = kube_cluster, queue_ns, tmp_path / "runs"
    kind = "pytorchjobs" if backend == "pytorchjob" else "rayjobs"
    # the first holds the quota until this test has seen the second queued (not for a fixed time, which a busy
    # machine can use up before the checks run): ks.finish_pods ends its pod then
    first = _submit(info, ns, runs, 3, "3600s", f"backend={backend}")
    ks.wait_for(lambda: _status(info, ns, runs, first)["kueue"]["state"] == "Admitted", timeout=60,
                what=f"{first} admitted")
    second = _submit(info, ns, runs, 4, "5s", f"backend={backend}")
    follower = launcher(["logs", second, "-n", ns, "--follow"], info, tmp_path / "follow-runs")

    # the second is held by Kueue for quota, and every view says so
    def queued_for_quota():
        s = _status(info, ns, runs, second)
        return s if s["state"]["phase"] == "Queued" and "nvidia.com/gpu" in (s["kueue"].get("message") or "") else None
    st = ks.wait_for(queued_for_quota, timeout=60, what=f"{second} queued for GPU quota")
    assert st["kueue"]["state"] == "Queued" and "quota" in st["kueue"]["message"], st["kueue"]
    assert _status(info, ns, runs, first)["state"]["phase"] in ("Pending", "Running"), "first finished too soon"
    rc, out, err = run_launcher(["status", second, "-n", ns], info, runs)
    assert rc == 0 and "state: Queued" in out and f"LocalQueue {kq.LOCAL_QUEUE}" in out and "nvidia.com/gpu" in out, out
    rc, out, err = run_launcher(["list", "-n", ns, "-o", "json"], info, runs)
    phases = {r["name"]: r["state"]["phase"] for r in json.loads(out)["items"]}
    assert phases[second] == "Queued" and phases[first] in ("Pending", "Running"), phases
    assert _pods(info, ns, second) == [], "a queued job has no pods"
    ks.finish_pods(info, ns, first)

    # wait goes through the queueing: the second is admitted only once the first finished, then succeeds
    rc, out, err = run_launcher(["wait", second, "-n", ns, "--timeout", "240"], info, runs, timeout=300)
    assert rc == 0, out + err
    done = kq.condition(kq.workload(info, ns, _uid(info, ns, kind, first)), "Finished")
    admitted = kq.condition(kq.workload(info, ns, _uid(info, ns, kind, second)), "Admitted")
    assert done.get("status") == "True" and admitted.get("status") == "True", (done, admitted)
    assert _when(admitted) >= _when(done), (done, admitted)
    # `logs --follow`, started while the run was queued, said why it waited and followed it to the end
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, out + err
    assert "queued: Queued" in err and "nvidia.com/gpu" in err, err
    assert _status(info, ns, runs, first)["state"]["phase"] == "Succeeded"


# the holder of the quota is a PyTorchJob in both cases (its KWOK pod runs for as long as it is told; a RayJob's
# fake dashboard finishes it after 5 s); the job under test is of each backend
@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob", "trainjob"])
def test_two_node_job_is_admitted_whole_or_not_at_all(trainer, queue_ns, tmp_path, backend):
    info, ns, runs = trainer, queue_ns, tmp_path / "runs"
    first = _submit(info, ns, runs, 3, "25s")  # 2 of the 3 GPUs
    ks.wait_for(lambda: _status(info, ns, runs, first)["kueue"]["state"] == "Admitted", timeout=60, what="admitted")
    gang = ("resources.nodes=2", "resources.gpus_per_node=1")  # 2 pods of 1 GPU: one would fit, both do not
    second = _submit(info, ns, runs, 5, "5s", *gang, f"backend={backend}")
    ks.wait_for(lambda: _status(info, ns, runs, second)["state"]["phase"] == "Queued", timeout=60, what="queued")
    # while the first runs, no pod of the 2-node job exists: Kueue admits all its pods or none
    while _status(info, ns, runs, first)["state"]["phase"] != "Succeeded":
        assert _pods(info, ns, second) == [], "a pod of a partly-fitting gang was created"
        time.sleep(1)
    rc, out, err = run_launcher(["wait", second, "-n", ns, "--timeout", "180"], info, runs, timeout=240)
    assert rc == 0, out + err
    st = _status(info, ns, runs, second)
    assert st["kueue"]["state"] == "Finished", st
    # admitted whole: every pod set with all its pods (no partial admission)
    kind = {"pytorchjob": "pytorchjobs", "rayjob": "rayjobs", "trainjob": "trainjobs.trainer.kubeflow.org"}[backend]
    wl = kq.workload(info, ns, _uid(info, ns, kind, second))
    want = {ps["name"]: ps["count"] for ps in wl["spec"]["podSets"]}
    got = {a["name"]: a["count"] for a in wl["status"]["admission"]["podSetAssignments"]}
    assert got == want and sum(want.values()) >= 2, (want, got)


def _end(info, ns, runs, job) -> None:
    """End a held run (its KWOK pods run for an hour): mark its pods done (ks.finish_pods) on every look until it
    has succeeded, so a pod created after one look (a RayJob's submitter comes after its head; a re-admitted run's
    pods after the admission) is caught by the next."""
    def ended():
        if _pods(info, ns, job):
            ks.finish_pods(info, ns, job)
        return _status(info, ns, runs, job)["state"]["phase"] == "Succeeded"
    ks.wait_for(ended, timeout=300, interval=2, what=f"{job} ended by the test")


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_high_priority_preempts_low_priority_and_both_finish(kube_cluster, queue_ns, tmp_path, backend):
    """Both runs are held (KWOK pods of an hour) and ended by the test once it has looked: the low one can end only
    by pre-emption, and it stays pre-empted until the test ends the high one. So no check races a run's lifetime,
    which a busy machine can use up (the low run had 40 s to be pre-empted in, the window to see it was the high
    run's 10 s)."""
    info, ns, runs = kube_cluster, queue_ns, tmp_path / "runs"
    kq.priority_classes(info)
    low = _submit(info, ns, runs, 3, "3600s", "scheduling.priority_class=grpo-e2e-low")
    ks.wait_for(lambda: _status(info, ns, runs, low)["state"]["phase"] == "Running", timeout=60, what="low running")
    follows = tmp_path / "follow-runs"  # `logs --follow` of the low run, from before its pre-emption to its end
    follower = launcher(["logs", low, "-n", ns, "--follow"], info, follows)
    high = _submit(info, ns, runs, 4, "3600s", "scheduling.priority_class=grpo-e2e-high", f"backend={backend}")

    # the low one is pre-empted (suspended, its pods gone) and says why; the high one runs. Kueue marks the workload
    # Evicted a moment before the job is suspended: wait for both, a state that now lasts until the test moves on
    def preempted():
        s = _status(info, ns, runs, low)
        return s if s["kueue"]["state"] == "Preempted" and s["state"]["phase"] == "Queued" else None
    st = ks.wait_for(preempted, timeout=120, what=f"{low} pre-empted and suspended")
    assert "Preempted" in st["kueue"]["reason"], st["kueue"]
    rc, out, err = run_launcher(["status", low, "-n", ns], info, runs)
    assert "Preempted" in out and "state: Queued" in out, out
    # `wait` on the pre-empted run says it is queued and goes on waiting: it is not fooled by the suspension
    wait_err = tmp_path / "wait-low.err"
    with open(wait_err, "w") as sink:
        waiter = launcher(["wait", low, "-n", ns, "--timeout", "900"], info, runs, stderr=sink)
    ks.wait_for(lambda: f"{low} is Queued" in wait_err.read_text(), timeout=120, what="wait to report the queued run")

    _end(info, ns, runs, high)
    rc, out, err = run_launcher(["wait", high, "-n", ns, "--timeout", "120"], info, runs, timeout=180)
    assert rc == 0, out + err
    # the low one is admitted again now, but cannot have ended (its pods run for an hour until `_end`): wait waits
    assert waiter.poll() is None, wait_err.read_text()
    _end(info, ns, runs, low)
    out, _ = waiter.communicate(timeout=120)
    assert waiter.returncode == 0 and f"{low} succeeded" in out, out + wait_err.read_text()
    wl = kq.workload(info, ns, _uid(info, ns, "pytorchjobs", low))
    assert kq.condition(wl, "Finished").get("status") == "True"
    assert kq.condition(wl, "Requeued") or kq.condition(wl, "Preempted"), wl["status"]["conditions"]
    # the follower waited through the pre-emption (README: `--follow` waits through it), said why, and followed the
    # readmitted run to its end (KWOK pods print no steps here: the run's end is what it can show)
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, out + err
    assert "queued: Preempted" in err and f"{low}: Succeeded" in err, err
    assert err.index("queued: Preempted") < err.index(f"{low}: Succeeded"), err


def test_doctor_follows_the_local_queue_to_its_cluster_queue(kube_cluster, queue_ns, tmp_path):
    from launcher_helpers import CONFIG

    rc, out, err = run_launcher(["doctor", CONFIG, "-n", queue_ns, *_sets(*QUEUE)], kube_cluster, tmp_path / "runs")
    line = next((ln for ln in out.splitlines() if ln[2:].startswith("kueue")), "")
    assert line.startswith("✓ kueue") and f"LocalQueue {kq.LOCAL_QUEUE} in {queue_ns} → ClusterQueue {kq.CLUSTER_QUEUE}" in line, out
