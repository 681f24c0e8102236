"""`launcher doctor --smoke`: the smoke job's verdicts (pure), and submit → follow → parse → delete over FakeKube.

The smoke workload's spec fields are not merged yet: `smoke_spec_stub.install` stands in for them.
"""
from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import pytest
import yaml

import smoke_spec_stub
from kube_fakes import FakeKube, pod
from launcher import doctor as D
from launcher.config import load_spec
from launcher.kube import jobs as J

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
ALL_OK = ["[smoke] check user ok uid=1000 gid=1000", "[smoke] check rootfs ok read-only",
          "[smoke] check writable ok /tmp /home/verl /workspace", "[smoke] check shm ok 16Gi",
          "[smoke] check nccl ok 2 ranks, 1.2 GB/s", "[smoke] result ok"]


@pytest.fixture
def spec(monkeypatch):
    smoke_spec_stub.install(monkeypatch)
    return D.smoke_spec(load_spec(CONFIG, ["scheduling.namespace=ns"]))


def outcome(spec, pods, lines, state=("Succeeded", True, True, ""), timed_out=False):
    return D.SmokeOutcome(spec.job_name, J.JobState(state[0], state[1], state[2], state[3]), pods, lines,
                          timed_out=timed_out, timeout=60)


def by_name(checks):
    return {c.name: c for c in checks}


def test_smoke_spec_is_the_experiment_as_a_smoke_job(spec):
    base = load_spec(CONFIG, ["scheduling.namespace=ns"])
    assert spec.workload == "smoke" and spec.name == "grpo-exp3-doctor"
    assert spec.job_name != base.job_name
    for field in ("image", "image_pull_policy", "backend", "resources", "security", "scheduling", "network"):
        assert getattr(spec, field) == getattr(base, field), field


def test_all_ok(spec):
    job = spec.job_name
    checks = D.smoke_checks(spec, outcome(spec, [pod(f"{job}-master-0", job, phase="Succeeded", state="terminated")],
                                          {"master-0": ALL_OK}))
    assert [c.name for c in checks] == ["smoke: pods", "smoke: user", "smoke: rootfs", "smoke: writable",
                                        "smoke: shm", "smoke: nccl", "smoke: result"]
    assert all(c.status == D.OK for c in checks), checks
    assert by_name(checks)["smoke: shm"].finding == "shm: 16Gi (1 pod(s))"
    assert by_name(checks)["smoke: nccl"].finding.startswith("NCCL all-reduce: 2 ranks")
    assert D.exit_code(checks) == 0


def test_image_pull_failure_names_the_image_and_the_pull_secret(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Pending", state="ImagePullBackOff")
    p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = \
        'Back-off pulling image "ghcr.io/grpo-launcher/verl-grpo:0.1.0"'
    checks = D.smoke_checks(spec, outcome(spec, [p], {"master-0": []}, ("Running", False, False, ""), timed_out=True))
    assert len(checks) == 1
    c = checks[0]
    assert c.status == D.FAIL and c.name == "smoke: pods"
    assert "1 of 1 pod(s) never started within 60s: master-0: ImagePullBackOff Back-off pulling image" in c.finding
    assert "ghcr.io/grpo-launcher/verl-grpo:0.1.0, field image" in c.fix and "secrets.image_pull_secrets" in c.fix


def test_pending_pod_gives_the_schedulers_message(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Pending", state="x")
    p["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable",
                                                        "message": "0/3 nodes are available: 3 Insufficient memory."}]}
    c = D.smoke_checks(spec, outcome(spec, [p], {}, ("Running", False, False, ""), timed_out=True))[0]
    assert c.status == D.FAIL and "Unschedulable: 0/3 nodes are available: 3 Insufficient memory." in c.finding
    assert "gpu-nodes check" in c.fix


def test_no_pod_at_all(spec):
    c = D.smoke_checks(spec, outcome(spec, [], {}, ("Pending", False, False, "not started"), timed_out=True))[0]
    assert c.status == D.FAIL and "no pod was created within 60s" in c.finding


def test_shm_too_small_and_pods_that_cannot_reach_each_other(spec):
    job = spec.job_name
    pods = [pod(f"{job}-master-0", job, phase="Failed", state="terminated"),
            pod(f"{job}-worker-0", job, phase="Failed", state="terminated")]
    lines = {"master-0": ["[smoke] check shm FAIL /dev/shm is 64Mi, need 1Gi",
                          "[smoke] check allreduce FAIL no peer connected to 10.244.0.7:23456 within 30s",
                          "[smoke] result FAIL shm allreduce"],
             "worker-0": ["[smoke] check shm ok 1Gi", "[smoke] check allreduce FAIL cannot connect to master:23456",
                          "[smoke] result FAIL allreduce"]}
    checks = by_name(D.smoke_checks(spec, outcome(spec, pods, lines, ("Failed", True, False, "1 pod failed"))))
    shm = checks["smoke: shm"]
    assert shm.status == D.FAIL and shm.finding == "shm: master-0: /dev/shm is 64Mi, need 1Gi"
    assert "raise resources.shm_size" in shm.fix
    net = checks["smoke: allreduce"]
    assert net.status == D.FAIL and net.finding.startswith("reach each other (all-reduce): master-0: no peer")
    assert "worker-0: cannot connect to master:23456" in net.finding and "pod-to-pod TCP" in net.fix
    assert checks["smoke: result"].status == D.FAIL and checks["smoke: result"].finding.endswith("FAIL allreduce shm")
    assert checks["smoke: nccl"].status == D.WARN  # GPU config, no NCCL line


def test_no_result_line_reports_the_pods_problem(spec):
    job = spec.job_name
    p = pod(f"{job}-master-0", job, phase="Failed", state="terminated")
    p["spec"]["containers"][0]["resources"] = {"limits": {"memory": "128Gi"}}
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled", "exitCode": 137}
    checks = by_name(D.smoke_checks(spec, outcome(spec, [p], {"master-0": ["[smoke] check user ok", "loading"]},
                                                  ("Failed", True, False, "OOMKilled"))))
    r = checks["smoke: result"]
    assert r.status == D.FAIL and "master-0 printed no `[smoke] result` line (job Failed: OOMKilled)" in r.finding
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
    from launcher.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    _operator(fk, ["starting", *ALL_OK])
    checks = run_smoke(fk, spec, _args(tmp_path))
    assert [c.status for c in checks] == [D.OK] * 7, checks
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
    from launcher.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    _operator(fk, ALL_OK)
    checks = run_smoke(fk, spec, _args(tmp_path, keep=True))
    assert checks[-1].name == "smoke: kept" and fk.deleted == []


def test_pods_that_never_start_time_out_and_the_job_is_deleted(spec, tmp_path):
    from launcher.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    _operator(fk, [], start=False)
    t0 = time.monotonic()
    checks = run_smoke(fk, spec, _args(tmp_path, timeout=2))
    assert time.monotonic() - t0 < 20
    assert len(checks) == 1 and checks[0].status == D.FAIL
    assert "never started within 2s: master-0: ErrImagePull pull access denied" in checks[0].finding
    assert ("PyTorchJob", spec.job_name) in fk.deleted


def test_a_leftover_doctor_job_is_named_not_touched(spec, tmp_path):
    from launcher.commands.doctor import run_smoke

    fk = FakeKube(namespace="ns")
    fk.put({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": spec.job_name, "labels": {}}})
    checks = run_smoke(fk, spec, _args(tmp_path))
    assert checks[0].status == D.FAIL and f"launcher delete {spec.job_name} -n ns" in checks[0].fix
    assert fk.created == [] and fk.deleted == []


def test_a_refused_create_is_a_failed_check_and_rolled_back(spec, tmp_path):
    from launcher.commands.doctor import run_smoke
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
    assert len(checks) == 1 and checks[0].name == "smoke: submit" and checks[0].status == D.FAIL
    assert "forbidden (403)" in checks[0].finding and "--serviceaccount ns:bot" in checks[0].fix
    assert fk.deleted == [("ConfigMap", f"{spec.job_name}-spec")]


def test_smoke_is_not_run_after_a_failed_static_check(monkeypatch, tmp_path, capsys):
    from kube_fakes import FakeApiServer
    from launcher.cli import main

    smoke_spec_stub.install(monkeypatch)
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
