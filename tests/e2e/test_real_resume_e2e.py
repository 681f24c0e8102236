"""On the real node (real kubelet, containerd, the CPU image): a running pod evicted mid-run through the Eviction
API is replaced by the training-operator (run_policy.backoff_limit > 0), the replacement's real container runs
the entrypoint again, `submit --follow` follows both pods' logs, metrics.jsonl holds every step once with the
replacement's rows, and `status` and the report show two attempts.

The workload is configs/smoke-cpu.yaml (workload smoke: verl's trainer cannot run without a GPU), so no
checkpoint is resumed here: the replacement starts over at step 1 and every step of the evicted pod is lost,
which is what the attempts show. The resume decision itself runs in the GPU job only (tests/verl/test_resume_verl.py
proves it on real verl checkpoints; tests/e2e/test_resume_e2e.py follows a resumed attempt on KWOK).
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
import realnode as rn
from launcher_helpers import launcher, rows, run_launcher

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.smallpods]


@pytest.fixture(scope="module")
def real_node(kube_cluster):
    rn.ensure_real_node(kube_cluster)
    return kube_cluster


def test_real_pod_evicted_mid_run_is_replaced_and_followed(real_node, kube_api, namespace, tmp_path):
    from kubernetes import client

    from launcher.run.attempts import load, summarise
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    steps = 10
    sets = [f"smoke.steps={steps}", "smoke.step_seconds=2", "run_policy.backoff_limit=2"]
    job = load_spec(rn.SMOKE, [f"scheduling.namespace={ns}", *sets]).job_name
    args = ["submit", rn.SMOKE, "-n", ns, "--follow", *[a for s in sets for a in ("--set", s)]]
    follower = launcher(args, info, runs)
    core = client.CoreV1Api(kube_api)
    try:
        pod = rn.wait_pod(info, ns, rn.running(), 300, "pytorch container running")
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        ks.wait_for(lambda: "step:3 " in info.kubectl("-n", ns, "logs", name, "-c", "pytorch").stdout,
                    timeout=240, what="step 3")
        core.create_namespaced_pod_eviction(name, ns, client.V1Eviction(metadata=client.V1ObjectMeta(name=name,
                                                                                                     namespace=ns)))
        rn.wait_pod(info, ns, lambda p: p["metadata"]["uid"] != uid and rn.running()(p), 300,
                    "the replacement pod running")
        out, err = follower.communicate(timeout=600)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err[-3000:]
    got = rows(runs / job)
    assert [r["step"] for r in got] == list(range(1, steps + 1))  # each step once
    meta = json.loads((runs / job / "metrics.meta.json").read_text())
    assert all(uid not in meta["step_attempt"][str(s)] for s in range(1, steps + 1))  # the replacement's rows won
    att = summarise(load(runs / job))
    assert len(att) == 2 and att[1]["first_step"] == 1 and att[1]["steps_lost"] >= 3
    rc, sout, serr = run_launcher(["status", job, "-n", ns], info, runs)
    assert rc == 0 and "attempts (2" in sout, serr
    rc, _, rerr = run_launcher(["report", str(runs / job)], info, runs)
    assert rc == 0, rerr
    assert "Attempts and restarts" in (runs / job / "report.md").read_text()
