"""Job/pod interpretation: states, the reasons a user needs, RayJob pod selection by label."""
from __future__ import annotations

from kube_fakes import FakeKube, pod, pytorchjob
from launcher.kube import jobs as J


def test_pytorchjob_states():
    assert J.job_state("pytorchjob", pytorchjob("j", (("Created", "True"),))).phase == "Pending"
    assert J.job_state("pytorchjob", pytorchjob("j", (("Created", "True"), ("Running", "True")))).phase == "Running"
    done = J.job_state("pytorchjob", pytorchjob("j", (("Running", "False"), ("Succeeded", "True"))))
    assert done.finished and done.succeeded
    failed = J.job_state("pytorchjob", pytorchjob("j", (("Failed", "True"),)))
    assert failed.finished and not failed.succeeded
    assert J.job_state("pytorchjob", None).phase == "Deleted"


def test_rayjob_states_use_deployment_and_job_status_not_exit_codes():
    rj = lambda dep, js="", reason="": {"status": {"jobDeploymentStatus": dep, "jobStatus": js, "reason": reason}}
    assert J.job_state("rayjob", rj("Initializing")).phase == "Pending"
    assert J.job_state("rayjob", rj("Running", "RUNNING")).phase == "Running"
    ok = J.job_state("rayjob", rj("Complete", "SUCCEEDED"))
    assert ok.finished and ok.succeeded
    # Complete with a FAILED job (kuberay#3211: the submitter exited 0) is a failure
    bad = J.job_state("rayjob", rj("Complete", "FAILED"))
    assert bad.finished and not bad.succeeded
    grace = J.job_state("rayjob", rj("Failed", "FAILED", "JobDeploymentStatusTransitionGracePeriodExceeded"))
    assert grace.finished and not grace.succeeded and "GracePeriod" in grace.reason


def test_pod_problems_in_user_words():
    p = pod("p", "j", phase="Pending", state="ImagePullBackOff")
    p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = 'Back-off pulling image "x"'
    assert J.pod_problem(p) == 'ImagePullBackOff in container pytorch: Back-off pulling image "x"'
    p = pod("p", "j", state="CrashLoopBackOff", restart=3)
    p["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"reason": "Error", "exitCode": 1}}
    assert J.pod_problem(p).startswith("CrashLoopBackOff in container pytorch") and "last exit: Error" in J.pod_problem(p)
    p = pod("p", "j", phase="Failed")
    p["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    assert J.pod_problem(p) == "Evicted: The node was low on resource: memory."
    assert J.pod_problem(pod("p", "j")) is None


def test_rayjob_pods_by_label_include_only_our_submitter():
    fk = FakeKube()
    job = "exp-abcdef12"
    ref = J.JobRef("rayjob", job, {"metadata": {"name": job}})
    ours = {"app.kubernetes.io/name": "verl-grpo", "app.kubernetes.io/instance": job}
    fk.put(pod(f"{job}-x7k2p-head-abcde", job, container="ray-head", labels={**ours, "ray.io/cluster": f"{job}-x7k2p"}))
    fk.put(pod(f"{job}-q9z8w", job, container="ray-job-submitter",
               labels={"batch.kubernetes.io/job-name": job, "job-name": job},
               owner={"kind": "Job", "name": job}))
    fk.put(pod("impostor", job, labels={"batch.kubernetes.io/job-name": job}, owner={"kind": "Job", "name": "other"}))
    fk.put(pod("unrelated", "other-job"))
    pods = J.job_pods(fk, ref)
    names = [p["metadata"]["name"] for p in pods]
    assert sorted(names) == sorted([f"{job}-x7k2p-head-abcde", f"{job}-q9z8w"])
    shorts = sorted(J.short_name(p, job) for p in pods)
    assert shorts == ["head-abcde", "submitter"]
    sub = next(p for p in pods if J.is_submitter(p))
    assert J.main_container(sub) == "ray-job-submitter"


def test_find_run_resolves_experiment_to_newest_and_refuses_foreign_jobs():
    import pytest

    from launcher.errors import BadInput

    fk = FakeKube()
    old, new = pytorchjob("exp-11111111"), pytorchjob("exp-22222222")
    old["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    new["metadata"]["creationTimestamp"] = "2026-01-02T00:00:00Z"
    fk.put(old)
    fk.put(new)
    assert J.find_run(fk, "exp").name == "exp-22222222"
    assert J.find_run(fk, "exp-11111111").name == "exp-11111111"
    foreign = pytorchjob("theirs")
    foreign["metadata"]["labels"] = {}
    fk.put(foreign)
    with pytest.raises(BadInput, match="not created by the launcher"):
        J.find_run(fk, "theirs")


def _with_limit(p: dict, memory: str | None) -> dict:
    if memory:
        p["spec"]["containers"][0]["resources"] = {"limits": {"memory": memory, "cpu": "1"}}
    return p


def test_oomkilled_names_the_memory_limit_and_the_field_to_raise():
    # current state terminated
    p = _with_limit(pod("p", "j", phase="Failed", state="terminated", container="trainer"), "512Mi")
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled", "exitCode": 137}
    assert J.pod_problem(p) == \
        "container trainer was OOMKilled (memory limit 512Mi, exit 137); raise resources.memory"
    # lastState, container restarted and running again
    p = _with_limit(pod("p", "j", container="pytorch", restart=1), "128Gi")
    p["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    assert J.pod_problem(p) == \
        "container pytorch was OOMKilled (memory limit 128Gi, exit 137); raise resources.memory"
    # lastState while in CrashLoopBackOff: OOMKilled wins over the generic back-off
    p = _with_limit(pod("p", "j", state="CrashLoopBackOff", restart=3), "2Gi")
    p["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    assert J.pod_problem(p) == ("container pytorch was OOMKilled (memory limit 2Gi, exit 137, restarting "
                                "(CrashLoopBackOff)); raise resources.memory")
    # no limit: the node ran out
    p = pod("p", "j", phase="Failed", state="terminated")
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled"}
    assert J.pod_problem(p) == \
        "container pytorch was OOMKilled (no memory limit: the node ran out of memory); raise resources.memory"
    # the Ray head's field is head_memory; an init container's limit is the launcher's
    p = _with_limit(pod("p", "j", container="ray-head", phase="Failed", state="terminated"), "16Gi")
    p["metadata"]["labels"]["grpo.launcher.io/role"] = "head"
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled", "exitCode": 137}
    assert J.pod_problem(p).endswith("(memory limit 16Gi, exit 137); raise resources.head_memory")
    p = pod("p", "j", phase="Pending", state="running")
    p["spec"]["initContainers"] = [{"name": "prepare-data", "resources": {"limits": {"memory": "2Gi"}}}]
    p["status"]["initContainerStatuses"] = [{"name": "prepare-data", "restartCount": 0, "state": {
        "terminated": {"reason": "OOMKilled", "exitCode": 137}}}]
    assert J.pod_problem(p).startswith("container prepare-data was OOMKilled (memory limit 2Gi, exit 137); "
                                       "the init container's limit is fixed")


def test_status_verb_reports_oomkilled_with_the_limit(monkeypatch, capsys):
    from launcher.cli.main import main
    from launcher.cli import cluster as _cluster

    fk = FakeKube()
    fk.events_for = lambda names: []
    job = "exp-abcdef12"
    fk.put(pytorchjob(job, (("Failed", "True"),)))
    p = _with_limit(pod(f"{job}-master-0", job, phase="Failed", state="terminated"), "512Mi")
    p["status"]["containerStatuses"][0]["state"]["terminated"] = {"reason": "OOMKilled", "exitCode": 137}
    fk.put(p)
    monkeypatch.setattr(_cluster, "connect", lambda args, namespace=None: fk)
    assert main(["status", job]) == 0
    out = capsys.readouterr().out
    assert "! container pytorch was OOMKilled (memory limit 512Mi, exit 137); raise resources.memory" in out
