"""`launcher doctor --smoke`: the smoke job's verdicts (pure), and submit → follow → parse → delete over FakeKube.

The log lines are written by hand in the format `launcher.entrypoint.smoke` prints (`[smoke] check <name> ok|FAIL
<detail>`, `writable:<dir>`, `<check>@<host>` for the checks the driver ran on another pod's Ray node, the
verl-format metric line, `[smoke] result ...`), so a changed parser or a changed table of fixes fails here.
"""
from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import pytest
import yaml

from kube_fakes import FakeKube, pod
from launcher.doctor import check as C
from launcher.doctor import smoke as SM
from launcher.spec.load import load_spec
from launcher.kube import jobs as J
from entrypoint_support import cluster_dir  # noqa: F401 - kills the real-workload test's Ray processes

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")  # GPU pods: 2 GPUs each
SMOKE_CONFIG = str(REPO / "configs" / "smoke-cpu.yaml")  # CPU-only pods


def pod_checks(host: str = "", *, shm: str = "/dev/shm 16384.0MiB (smoke.min_shm 64Mi = 64.0MiB; resources.shm_size "
               "16Gi)") -> list[str]:
    """The eight pod-check lines of one pod (`@host`: as the driver prints them for another pod's node)."""
    at = f"@{host}" if host else ""
    return [f"[smoke] check user{at} ok uid=1000 gid=1000 user=verl (expected 1000:1000)",
            f"[smoke] check root_readonly{at} ok / EROFS, /opt EROFS",
            f"[smoke] check writable:tmp{at} ok /tmp",
            f"[smoke] check writable:home{at} ok /home/verl",
            f"[smoke] check writable:shm{at} ok /dev/shm",
            f"[smoke] check writable:storage{at} ok /workspace",
            f"[smoke] check shm_size{at} ok {shm}",
            f"[smoke] check dataset{at} ok train /workspace/data/gsm8k/train.parquet 8 rows, "
            "val /workspace/data/gsm8k/test.parquet 4 rows"]


def steps(n: int = 3) -> list[str]:
    out = []
    for step in range(1, n + 1):
        out.append(f"step:{step} - smoke/allreduce_ms:{0.25 * step} - smoke/ray_task_ms:{2.5 if step == 2 else 1.0} - "
                   f"smoke/world_size:1 - timing_s/step:1.004")
    return out + [f"[smoke] check steps ok {n} step(s), every all-reduce equal to its independently computed sum"]


def all_ok(job: str) -> list[str]:
    """A single-node GPU PyTorchJob's log, all green, in the order the workload prints it."""
    return [f"[smoke] start role=single-node backend=pytorchjob nodes=1 gpus_per_node=2 cpus=16 steps=3 "
            f"host={job}-master-0",
            *pod_checks(),
            "[smoke] check rendezvous ok gloo rank 0 of 1 via MASTER_ADDR:MASTER_PORT 127.0.0.1:23456 in 0.1s",
            "[smoke] check allreduce ok gloo, 1 rank(s): 1 (expected 1) in 0.21ms",
            "[smoke] check nccl_allreduce ok backend=nccl world_size=2 nnodes=1 size_mb=16 allreduce_ms=0.512 "
            "busbw_gbps=32.77",
            "[smoke] check verl_config ok 42 overrides composed and validated by verl 0.9.1 (device cuda)",
            "[smoke] check ray_init ok local Ray with num_cpus=16 in 3.2s",
            "[smoke] check ray_nodes ok 1 alive, expected 1 (resources.nodes)",
            f"[smoke] check ray_task@{job}-master-0 ok ip=10.244.0.5 node=ab12cd34 in 40ms",
            *steps(),
            "[smoke] result ok"]


ALL_NAMES = ["smoke: pods", "smoke: user", "smoke: root_readonly", "smoke: writable", "smoke: shm_size",
             "smoke: dataset", "smoke: verl_config", "smoke: ray_init", "smoke: ray_nodes", "smoke: ray_task",
             "smoke: rendezvous", "smoke: allreduce", "smoke: nccl_allreduce", "smoke: steps", "smoke: result"]


@pytest.fixture
def spec():
    return SM.smoke_spec(load_spec(CONFIG, ["scheduling.namespace=ns"]))


@pytest.fixture
def cpu_spec():
    return SM.smoke_spec(load_spec(SMOKE_CONFIG, ["scheduling.namespace=ns"]))


def placed(name, job, node, **kw):
    p = pod(name, job, **kw)
    p["spec"]["nodeName"] = node
    return p


def outcome(spec, pods, lines, state=("Succeeded", True, True, ""), timed_out=False):
    return SM.SmokeOutcome(spec.job_name, J.JobState(state[0], state[1], state[2], state[3]), pods, lines,
                           timed_out=timed_out, timeout=60)


def by_name(checks):
    return {c.name: c for c in checks}


def test_smoke_spec_is_the_experiment_as_a_smoke_job(spec):
    base = load_spec(CONFIG, ["scheduling.namespace=ns"])
    assert base.workload == "grpo" and spec.workload == "smoke" and spec.name == "grpo-exp3-doctor"
    assert spec.job_name != base.job_name
    for field in ("image", "image_pull_policy", "backend", "resources", "security", "scheduling", "network", "smoke"):
        assert getattr(spec, field) == getattr(base, field), field


def test_smoke_spec_of_a_smoke_config_keeps_its_smoke_section(cpu_spec):
    assert cpu_spec.name == "smoke-cpu-doctor" and cpu_spec.workload == "smoke"
    assert cpu_spec.resources.gpus_per_node == 0 and cpu_spec.smoke.min_shm == "128Mi"
    assert cpu_spec.smoke.connect_timeout_s == 120


def test_all_ok_groups_parts_and_hosts(spec):
    job = spec.job_name
    checks = SM.smoke_checks(spec, outcome(spec, [placed(f"{job}-master-0", job, "gpu-0", phase="Succeeded",
                                                         state="terminated")], {"master-0": all_ok(job)}))
    assert [c.name for c in checks] == ALL_NAMES
    assert all(c.status == C.OK for c in checks), checks
    got = by_name(checks)
    assert got["smoke: pods"].finding == "1 pod(s) started from ghcr.io/grpo-launcher/verl-grpo:0.1.0 (master-0 on gpu-0)"
    assert got["smoke: writable"].finding == ("writable directories: tmp /tmp; home /home/verl; shm /dev/shm; "
                                              "storage /workspace (1 pod(s): master-0)")
    assert got["smoke: shm_size"].finding == ("/dev/shm size: /dev/shm 16384.0MiB (smoke.min_shm 64Mi = 64.0MiB; "
                                              "resources.shm_size 16Gi) (1 pod(s): master-0)")
    assert got["smoke: ray_task"].finding == \
        "a Ray task on every node: ip=10.244.0.5 node=ab12cd34 in 40ms (1 pod(s): master-0)"
    assert got["smoke: nccl_allreduce"].finding.startswith("NCCL all-reduce over every GPU: backend=nccl world_size=2")
    assert got["smoke: steps"].finding == (
        "steps: 3 step(s), every all-reduce equal to its independently computed sum (1 pod(s): master-0); "
        "all-reduce max 0.75ms, Ray task max 2.5ms over 3 metric line(s)")
    assert got["smoke: result"].finding == f"{job} succeeded; every pod reported ok (master-0 single-node)"
    assert C.exit_code(checks) == 0


def two_cpu_pods(job, *, rendezvous_ok=True, worker_storage="ok /workspace"):
    """A 2-pod CPU PyTorchJob: master-0 (ray-head, the driver) and worker-0 (ray-worker, a participant)."""
    master, worker = f"{job}-master-0", f"{job}-worker-0"
    shm = "/dev/shm 256.0MiB (smoke.min_shm 128Mi = 128.0MiB; resources.shm_size 256Mi)"
    if rendezvous_ok:
        m_rdv = [f"[smoke] check rendezvous ok gloo rank 0 of 2 via MASTER_ADDR:MASTER_PORT {master}:23456 in 4.0s",
                 "[smoke] check allreduce ok gloo, 2 rank(s): 3 (expected 3) in 1.10ms"]
        w_rdv = [f"[smoke] check rendezvous ok gloo rank 1 of 2 via MASTER_ADDR:MASTER_PORT {master}:23456 in 4.1s",
                 "[smoke] check allreduce ok gloo, 2 rank(s): 3 (expected 3) in 1.20ms"]
        tail_m, tail_w = steps(), steps()[-1:]
    else:
        m_rdv = [f"[smoke] check rendezvous FAIL rank 0 served {master}:23456 but not all 2 ranks connected within "
                 "20s: the pods cannot reach each other (or some never started); DistStoreError: Timed out after 21 "
                 "seconds waiting for clients. 1/2 clients joined."]
        w_rdv = [f"[smoke] check rendezvous FAIL rank 1 could not rendezvous with {master}:23456 within 20s: the pods "
                 "cannot reach each other (check the master's Service, DNS and network policies); DistNetworkError: "
                 "timed out"]
        tail_m = tail_w = ["[smoke] check steps FAIL no all-reduce group (see the rendezvous check)"]
    worker_checks = [ln.replace("ok /workspace", worker_storage) if "writable:storage" in ln else ln
                     for ln in pod_checks(shm=shm)]
    host_checks = [ln.replace("ok /workspace", worker_storage) if "writable:storage" in ln else ln
                   for ln in pod_checks(worker, shm=shm)]
    m_failed = [n for n, bad in (("rendezvous", not rendezvous_ok),
                                 (f"writable:storage@{worker}", "FAIL" in worker_storage),
                                 ("steps", not rendezvous_ok)) if bad]
    w_failed = [n for n, bad in (("writable:storage", "FAIL" in worker_storage), ("rendezvous", not rendezvous_ok),
                                 ("steps", not rendezvous_ok)) if bad]
    lines = {
        "master-0": [f"[smoke] start role=ray-head backend=pytorchjob nodes=2 gpus_per_node=0 cpus=1 steps=3 "
                     f"host={master}", *pod_checks(shm=shm), *m_rdv,
                     "[smoke] check verl_config ok 40 overrides composed and validated by verl 0.9.1 (device cpu) "
                     "(0 GPUs: validated with trainer.n_gpus_per_node=1, one worker per CPU pod)",
                     "[smoke] check ray_init ok attached to 10.244.0.9:6379 in 1.5s",
                     "[smoke] check ray_nodes ok 2 alive, expected 2 (resources.nodes)",
                     f"[smoke] check ray_task@{master} ok ip=10.244.0.9 node=aaaa1111 in 30ms",
                     f"[smoke] check ray_task@{worker} ok ip=10.244.1.4 node=bbbb2222 in 55ms",
                     *host_checks, *tail_m,
                     "[smoke] result " + (f"FAIL {','.join(m_failed)}" if m_failed else "ok")],
        "worker-0": [f"[smoke] start role=ray-worker backend=pytorchjob nodes=2 gpus_per_node=0 cpus=1 steps=3 "
                     f"host={worker}", *worker_checks, *w_rdv, *tail_w,
                     "[smoke] result " + (f"FAIL {','.join(w_failed)}" if w_failed else "ok")],
    }
    pods = [placed(master, job, "grpo-node-0", phase="Succeeded", state="terminated"),
            placed(worker, job, "grpo-node-1", phase="Succeeded", state="terminated")]
    return pods, lines


def test_two_cpu_pods_all_ok_no_nccl_expected(cpu_spec):
    job = cpu_spec.job_name
    pods, lines = two_cpu_pods(job)
    checks = SM.smoke_checks(cpu_spec, outcome(cpu_spec, pods, lines))
    assert [c.name for c in checks] == [n for n in ALL_NAMES if n != "smoke: nccl_allreduce"]  # CPU: no NCCL, no warning
    assert all(c.status == C.OK for c in checks), checks
    got = by_name(checks)
    assert got["smoke: pods"].finding == ("2 pod(s) started from ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu "
                                          "(master-0 on grpo-node-0, worker-0 on grpo-node-1)")
    # worker-0's own lines and the driver's `<check>@<worker host>` lines are one pod, not three
    assert got["smoke: user"].finding == \
        "container user: uid=1000 gid=1000 user=verl (expected 1000:1000) (2 pod(s): master-0, worker-0)"
    assert got["smoke: ray_task"].finding == ("a Ray task on every node: master-0: ip=10.244.0.9 node=aaaa1111 in 30ms, "
                                              "worker-0: ip=10.244.1.4 node=bbbb2222 in 55ms "
                                              "(2 pod(s): master-0, worker-0)")
    assert got["smoke: rendezvous"].finding.startswith("pods reach each other (torch.distributed rendezvous): "
                                                       "master-0: gloo rank 0 of 2")
    assert got["smoke: result"].finding == f"{job} succeeded; every pod reported ok (master-0 ray-head, worker-0 ray-worker)"


def test_pods_that_cannot_reach_each_other_name_the_rendezvous_and_its_port(cpu_spec):
    job = cpu_spec.job_name
    pods, lines = two_cpu_pods(job, rendezvous_ok=False)
    checks = SM.smoke_checks(cpu_spec, outcome(cpu_spec, pods, lines, ("Failed", True, False, "PyTorchJobFailed")))
    got = by_name(checks)
    rdv = got["smoke: rendezvous"]
    assert rdv.status == C.FAIL
    assert rdv.finding == (
        f"pods reach each other (torch.distributed rendezvous): master-0: rank 0 served {job}-master-0:23456 but not "
        "all 2 ranks connected within 20s: the pods cannot reach each other (or some never started); DistStoreError: "
        f"Timed out after 21 seconds waiting for clients. 1/2 clients joined.; worker-0: rank 1 could not rendezvous "
        f"with {job}-master-0:23456 within 20s: the pods cannot reach each other (check the master's Service, DNS and "
        "network policies); DistNetworkError: timed out")
    assert rdv.fix.startswith("the pods cannot reach each other: allow pod-to-pod TCP port 23456 between the run's pods")
    assert "NetworkPolicies" in rdv.fix and "security groups" in rdv.fix and "CNI" in rdv.fix
    assert "smoke: allreduce" not in got  # never reached
    assert got["smoke: steps"].status == C.FAIL
    assert got["smoke: result"].finding == f"{job}: FAIL rendezvous, steps"
    assert "smoke: nccl_allreduce" not in got  # CPU pods: none expected
    assert [c.status for c in checks].count(C.FAIL) == 3 and C.exit_code(checks) == 1
    assert got["smoke: ray_nodes"].status == C.OK  # Ray's own ports were reachable


def test_a_check_failing_on_another_host_names_that_pod_and_the_part(cpu_spec):
    job = cpu_spec.job_name
    pods, lines = two_cpu_pods(job, worker_storage="FAIL /workspace: EACCES Permission denied")
    got = by_name(SM.smoke_checks(cpu_spec, outcome(cpu_spec, pods, lines, ("Failed", True, False, ""))))
    w = got["smoke: writable"]
    assert w.status == C.FAIL
    assert w.finding == "writable directories: worker-0 storage: /workspace: EACCES Permission denied"  # once, not twice
    assert "storage.mount_path (/workspace)" in w.fix and "security.run_as_group (1000" in w.fix
    assert got["smoke: result"].finding == f"{job}: FAIL writable:storage, writable:storage@worker-0"
    assert got["smoke: user"].status == C.OK


def test_shm_smaller_than_min_shm(cpu_spec):
    spec = SM.smoke_spec(load_spec(SMOKE_CONFIG, ["scheduling.namespace=ns", "smoke.min_shm=1Gi"]))
    job = spec.job_name
    bad = "/dev/shm 256.0MiB (smoke.min_shm 1Gi = 1024.0MiB; resources.shm_size 256Mi)"
    lines = [ln.replace("ok /dev/shm 16384", "x") for ln in pod_checks(shm=bad)]
    lines = [ln.replace(f"shm_size ok {bad}", f"shm_size FAIL {bad}") for ln in lines]
    got = by_name(SM.smoke_checks(spec, outcome(spec, [placed(f"{job}-master-0", job, "grpo-node-0", phase="Failed",
                                                              state="terminated")],
                                                {"master-0": [*lines, "[smoke] result FAIL shm_size"]},
                                                ("Failed", True, False, ""))))
    shm = got["smoke: shm_size"]
    assert shm.status == C.FAIL and shm.finding == f"/dev/shm size: master-0: {bad}"
    assert shm.fix.startswith("raise resources.shm_size (now 256Mi) to at least smoke.min_shm (1Gi)")
    assert got["smoke: result"].finding == f"{job}: FAIL shm_size"


def test_gpu_pods_without_an_nccl_line_warn(spec):
    job = spec.job_name
    lines = [ln for ln in all_ok(job) if "nccl_allreduce" not in ln]
    got = by_name(SM.smoke_checks(spec, outcome(spec, [pod(f"{job}-master-0", job, phase="Succeeded",
                                                           state="terminated")], {"master-0": lines})))
    w = got["smoke: nccl_allreduce"]
    assert w.status == C.WARN and w.finding == "no pod reported the NCCL all-reduce on the GPU pods (2 GPU(s) each)"
    assert "read the pod logs" in w.fix
    assert got["smoke: result"].status == C.OK


def test_gpu_pods_that_never_met_warn_that_nccl_did_not_run(spec):
    job = spec.job_name
    lines = {"master-0": [*pod_checks(), "[smoke] check rendezvous FAIL rank 0 served x:23456 but ...",
                          "[smoke] result FAIL rendezvous"]}
    got = by_name(SM.smoke_checks(spec, outcome(spec, [pod(f"{job}-master-0", job, phase="Failed",
                                                           state="terminated")], lines, ("Failed", True, False, ""))))
    assert got["smoke: nccl_allreduce"].status == C.WARN
    assert got["smoke: nccl_allreduce"].finding.endswith("(not run: the rendezvous failed)")
    assert got["smoke: rendezvous"].status == C.FAIL and "TCP port 23456" in got["smoke: rendezvous"].fix


def test_nccl_failure_points_at_the_nccl_environment_and_drivers(spec):
    job = spec.job_name
    lines = [ln.replace("nccl_allreduce ok", "nccl_allreduce FAIL") for ln in all_ok(job)]
    lines[-1] = "[smoke] result FAIL nccl_allreduce"
    got = by_name(SM.smoke_checks(spec, outcome(spec, [pod(f"{job}-master-0", job, phase="Failed", state="terminated")],
                                                {"master-0": lines}, ("Failed", True, False, ""))))
    n = got["smoke: nccl_allreduce"]
    assert n.status == C.FAIL and n.finding.startswith("NCCL all-reduce over every GPU: master-0: backend=nccl")
    assert "network.nccl_socket_ifname" in n.fix and "GPU drivers" in n.fix and "network.nccl_debug=INFO" in n.fix


@pytest.mark.parametrize("base, detail, want", [
    ("user", "uid=0 gid=0 user=root (expected 1000:1000)", "security.run_as_user/run_as_group (1000:1000)"),
    ("root_readonly", "/ created, /opt created (expected EROFS everywhere)", "security.read_only_root_filesystem"),
    ("dataset", "train /workspace/data/gsm8k/train.parquet: FileNotFoundError: x", "data.source_dir ("),
    ("verl_config", "ConfigCompositionException: Could not override", "the config the launcher generated"),
    ("ray_init", "ConnectionError: could not reach GCS", "Ray did not come up"),
    ("ray_nodes", "1 alive, expected 2 (resources.nodes)", "head's Service"),
    ("allreduce", "gloo, 2 rank(s): 2 (expected 3) in 1.0ms", "the pods cannot reach each other"),
    ("memory", "MemoryError: x", "raise resources.memory"),
    ("zeta", "new check", "read the pod logs"),
])
def test_each_failed_check_gets_its_fix(cpu_spec, base, detail, want):
    job = cpu_spec.job_name
    lines = {"master-0": [f"[smoke] check {base} FAIL {detail}", f"[smoke] result FAIL {base}"]}
    got = by_name(SM.smoke_checks(cpu_spec, outcome(cpu_spec, [pod(f"{job}-master-0", job, phase="Failed",
                                                                   state="terminated")], lines,
                                                    ("Failed", True, False, ""))))
    c = got[f"smoke: {base}"]
    assert c.status == C.FAIL and c.finding.endswith(f"master-0: {detail}")
    assert want in c.fix, c.fix


def test_hosts_not_among_the_pods_are_shown_without_the_job_prefix(cpu_spec):
    job = cpu_spec.job_name
    o = outcome(cpu_spec, [], {})
    assert o.where(f"{job}-worker-3") == "worker-3" and o.where("10.244.1.4") == "10.244.1.4"


def test_a_pod_recreated_after_the_job_failed_does_not_hide_the_failed_check(cpu_spec):
    """training-operator v1.9 (restartPolicy Never, backoffLimit 0) deletes the failed master pod and creates
    it again after the job is Failed: seen on the real nodes. The copy never starts; the verdict comes from the
    incarnation that ran and printed its lines, not "1 of 2 pod(s) never started"."""
    spec = SM.smoke_spec(load_spec(SMOKE_CONFIG, ["scheduling.namespace=ns", "smoke.min_shm=1Gi"]))
    job = spec.job_name
    bad = "/dev/shm 256.0MiB (smoke.min_shm 1Gi = 1024.0MiB; resources.shm_size 256Mi)"
    lines = [ln.replace(f"shm_size ok {pod_checks()[6].split(' ok ', 1)[1]}", f"shm_size FAIL {bad}")
             for ln in pod_checks()]
    ran = placed(f"{job}-master-0", job, "grpo-node-0", phase="Failed", state="terminated", uid="first")
    late = placed(f"{job}-master-0", job, "grpo-node-1", phase="Pending", state="PodInitializing", uid="second")
    got = by_name(SM.smoke_checks(spec, outcome(spec, [ran, late],
                                                {"master-0": [*lines, "[smoke] result FAIL shm_size"]},
                                                ("Failed", True, False, ""))))
    assert got["smoke: pods"].status == C.OK
    assert got["smoke: pods"].finding.startswith("1 pod(s) started from ") and "(master-0 on grpo-node-0)" in \
        got["smoke: pods"].finding
    assert got["smoke: shm_size"].status == C.FAIL and bad in got["smoke: shm_size"].finding
    assert got["smoke: result"].status == C.FAIL
    # a replica none of whose incarnations started is still reported, once, by its latest state
    late2 = placed(f"{job}-master-0", job, "grpo-node-1", phase="Pending", state="ErrImagePull", uid="third")
    first = placed(f"{job}-master-0", job, "grpo-node-0", phase="Pending", state="ContainerCreating", uid="fourth")
    c = SM.smoke_checks(spec, outcome(spec, [first, late2], {}, ("Running", False, False, ""), timed_out=True))[0]
    assert c.status == C.FAIL and c.finding.startswith("1 of 1 pod(s) never started within 60s: master-0: ErrImagePull")


def test_image_pull_failure_names_the_image_and_the_pull_secret(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Pending", state="ImagePullBackOff")
    p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = \
        'Back-off pulling image "ghcr.io/grpo-launcher/verl-grpo:0.1.0"'
    checks = SM.smoke_checks(spec, outcome(spec, [p], {"master-0": []}, ("Running", False, False, ""), timed_out=True))
    assert len(checks) == 1
    c = checks[0]
    assert c.status == C.FAIL and c.name == "smoke: pods"
    assert "1 of 1 pod(s) never started within 60s: master-0: ImagePullBackOff Back-off pulling image" in c.finding
    assert "ghcr.io/grpo-launcher/verl-grpo:0.1.0, field image" in c.fix and "secrets.image_pull_secrets" in c.fix


def test_pending_pod_gives_the_schedulers_message(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Pending", state="x")
    p["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable",
                                                        "message": "0/3 nodes are available: 3 Insufficient memory."}]}
    c = SM.smoke_checks(spec, outcome(spec, [p], {}, ("Running", False, False, ""), timed_out=True))[0]
    assert c.status == C.FAIL and "Unschedulable: 0/3 nodes are available: 3 Insufficient memory." in c.finding
    assert "gpu-nodes check" in c.fix


def test_no_pod_at_all(spec):
    c = SM.smoke_checks(spec, outcome(spec, [], {}, ("Pending", False, False, "not started"), timed_out=True))[0]
    assert c.status == C.FAIL and "no pod was created within 60s" in c.finding


def test_no_result_line_reports_the_pods_problem(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Failed", state="terminated")
    p["spec"]["containers"][0]["resources"] = {"limits": {"memory": "128Gi"}}
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled", "exitCode": 137}
    checks = by_name(SM.smoke_checks(spec, outcome(spec, [p], {"master-0": ["[smoke] check user ok", "loading"]},
                                                   ("Failed", True, False, "OOMKilled"))))
    r = checks["smoke: result"]
    assert r.status == C.FAIL and "master-0 printed no `[smoke] result` line (job Failed: OOMKilled)" in r.finding
    assert "container pytorch was OOMKilled (memory limit 128Gi, exit 137); raise resources.memory" in r.finding


# --- submit → follow → parse → delete -------------------------------------------------------------


def _args(tmp_path, **kw):
    return argparse.Namespace(runs_dir=str(tmp_path / "runs"), timeout=kw.get("timeout", 30), keep=kw.get("keep", False))


def _operator(fk: FakeKube, lines: list[str], *, start: bool = True):
    """Plays the training-operator: on the job's create, a master pod that logs `lines` and finishes."""

    def on_create(obj):
        if obj["kind"] != "PyTorchJob":
            return
        job = obj["metadata"]["name"]
        name = f"{job}-master-0"
        if not start:
            p = pod(name, job, phase="Pending", state="ErrImagePull")
            p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = "pull access denied"
            fk.put(p)
            return
        fk.put(pod(name, job))
        fk.append(name, "pytorch", 0, lines)

        def finish():
            time.sleep(1.5)
            fk.put(pod(name, job, phase="Succeeded", state="terminated"))
            done = fk.get(J.JOB_RESOURCES["pytorchjob"], job)
            done["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}
            fk.put(done)

        threading.Thread(target=finish, daemon=True).start()

    fk.on_create = on_create


def test_smoke_job_submitted_followed_parsed_and_deleted(spec, tmp_path):
    from launcher.cli.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    _operator(fk, ["starting", *all_ok(spec.job_name)])
    checks = run_smoke(fk, spec, _args(tmp_path))
    assert [c.name for c in checks] == ALL_NAMES
    assert [c.status for c in checks] == [C.OK] * 15, checks
    kinds = [(o["kind"], o["metadata"]["name"]) for o in fk.created]
    job = spec.job_name
    assert kinds == [("ConfigMap", f"{job}-spec"), ("PyTorchJob", job)]
    assert job.startswith("grpo-exp3-doctor-")
    # the pods get the smoke workload through the mounted spec
    assert yaml.safe_load(fk.created[0]["data"]["spec.yaml"])["workload"] == "smoke"
    assert ("PyTorchJob", job) in fk.deleted and ("ConfigMap", f"{job}-spec") in fk.deleted
    assert (tmp_path / "runs" / job / "logs" / f"{job}-master-0.log").read_text().splitlines()[-1] == \
        "[smoke] result ok"


def test_keep_leaves_the_job(spec, tmp_path):
    from launcher.cli.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    _operator(fk, all_ok(spec.job_name))
    checks = run_smoke(fk, spec, _args(tmp_path, keep=True))
    assert checks[-1].name == "smoke: kept" and fk.deleted == []


def test_pods_that_never_start_time_out_and_the_job_is_deleted(spec, tmp_path):
    from launcher.cli.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    _operator(fk, [], start=False)
    checks = run_smoke(fk, spec, _args(tmp_path, timeout=2))
    assert len(checks) == 1 and checks[0].status == C.FAIL
    assert "never started within 2s: master-0: ErrImagePull pull access denied" in checks[0].finding
    assert ("PyTorchJob", spec.job_name) in fk.deleted


def test_a_leftover_doctor_job_is_named_not_touched(spec, tmp_path):
    from launcher.cli.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    fk.put({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": spec.job_name, "labels": {}}})
    checks = run_smoke(fk, spec, _args(tmp_path))
    assert checks[0].status == C.FAIL and f"launcher delete {spec.job_name} -n ns" in checks[0].fix
    assert fk.created == [] and fk.deleted == []


def test_a_refused_create_is_a_failed_check_and_rolled_back(spec, tmp_path):
    from launcher.cli.commands.doctor import run_smoke
    from launcher.kube import ApiError

    fk = FakeKube(namespace="ns")
    fk.whoami = lambda: "system:serviceaccount:ns:bot"
    create = fk.create

    def refuse(obj, dry_run=False):
        if obj["kind"] == "PyTorchJob":
            raise ApiError(403, 'pytorchjobs.kubeflow.org is forbidden: cannot create', "create PyTorchJob x", "fake")
        return create(obj, dry_run=dry_run)

    fk.create = refuse
    checks = run_smoke(fk, spec, _args(tmp_path))
    assert len(checks) == 1 and checks[0].name == "smoke: submit" and checks[0].status == C.FAIL
    assert "forbidden (403)" in checks[0].finding and "--serviceaccount ns:bot" in checks[0].fix
    assert fk.deleted == [("ConfigMap", f"{spec.job_name}-spec")]


def test_smoke_is_not_run_after_a_failed_static_check(monkeypatch, tmp_path, capsys):
    from kube_fakes import FakeApiServer
    from launcher.cli.main import main

    api = FakeApiServer()
    try:
        monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(tmp_path / "kc", namespace="ns")))
        api.routes[("GET", "/version")] = (200, {"gitVersion": "v1.35.4"})
        api.routes[("GET", "/api/v1/namespaces/ns")] = (200, {})
        api.routes[("GET", "/apis")] = (200, {"groups": []})
        api.routes[("GET", "/api/v1/nodes")] = (200, {"items": []})
        api.routes[("GET", "/api/v1/pods")] = (200, {"items": []})
        api.routes[("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")] = (
            201, {"status": {"allowed": True}})
        assert main(["doctor", CONFIG, "-n", "ns", "--smoke"]) == 1
        out = capsys.readouterr().out
        assert "! smoke" in out and "not run: fix the failed checks above first" in out
        assert not [r for r in api.requests if r[0] == "POST" and "pytorchjobs" in r[1]]
    finally:
        api.close()


# --- the real workload's log, read by doctor ------------------------------------------------------


@pytest.mark.verl
@pytest.mark.timeout(240)
def test_doctor_reads_what_the_real_smoke_workload_prints(cluster_dir):
    """`python -m launcher.entrypoint` with the smoke workload on this machine (test_smoke_ray's set-up): doctor
    groups its lines, one check per base name, with the verdict the workload printed for each."""
    from launcher.doctor import smokelog
    from entrypoint_support import IDENTITY_FAILS, free_port, smoke_config, smoke_env, start_entrypoint

    tmp, procs = cluster_dir
    config = smoke_config(tmp, steps=2, min_shm="1Pi")  # no /dev/shm is that big: shm_size FAILs
    proc = start_entrypoint(config, smoke_env(tmp, MASTER_PORT=str(free_port()), LAUNCHER_RAY_TEMP_DIR=str(tmp / "r")),
                  tmp / "pod.log")
    procs.append(proc)
    assert proc.wait(timeout=220) == 1
    log = (tmp / "pod.log").read_text(errors="replace").splitlines()
    spec = load_spec(config)
    job = spec.job_name
    checks = SM.smoke_checks(spec, outcome(spec, [placed(f"{job}-master-0", job, "here", phase="Failed",
                                                         state="terminated")], {"master-0": log},
                                           ("Failed", True, False, "")))
    got = by_name(checks)
    assert [c.name for c in checks] == [n for n in ALL_NAMES if n != "smoke: nccl_allreduce"], \
        [c.line() for c in checks]
    assert got["smoke: shm_size"].status == C.FAIL and "smoke.min_shm 1Pi" in got["smoke: shm_size"].finding
    assert "raise resources.shm_size (now 256Mi) to at least smoke.min_shm (1Pi)" in got["smoke: shm_size"].fix
    assert got["smoke: user"].status == (C.FAIL if IDENTITY_FAILS else C.OK)
    for name in ("writable", "dataset", "verl_config", "ray_init", "ray_nodes", "ray_task", "rendezvous",
                 "allreduce", "steps"):
        assert got[f"smoke: {name}"].status == C.OK, got[f"smoke: {name}"]
    assert got["smoke: writable"].finding.startswith(f"writable directories: tmp /tmp; home {tmp}/home0; ")
    assert "over 2 metric line(s)" in got["smoke: steps"].finding
    assert got["smoke: result"].finding == f"{job}: FAIL " + ", ".join(sorted(
        {"shm_size", *(["user"] if IDENTITY_FAILS else [])}))
    assert smokelog.collect({"master-0": log}).pods["master-0"].start["role"] == "single-node"


def test_every_check_the_workload_runs_has_a_title_and_a_fix():
    from launcher.doctor import smokelog

    assert set(SM.SMOKE_TITLES) == set(smokelog.CHECK_ORDER) == set(SM.SMOKE_FIXES)
