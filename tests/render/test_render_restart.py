"""PyTorchJob restart policy: retries allowed (run_policy.backoff_limit > 0) restart the container in place,
which is the only policy training-operator v1.9 counts against backoffLimit and stops at it."""
from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.render.manifests import render

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"


@pytest.mark.parametrize("limit,expected", [(0, "Never"), (1, "OnFailure"), (3, "OnFailure")])
@pytest.mark.parametrize("nodes", [1, 2])
def test_replicas_and_pods_share_the_restart_policy(limit, expected, nodes):
    spec = load_spec(str(EXP3), [f"run_policy.backoff_limit={limit}", f"resources.nodes={nodes}"])
    job = next(o for o in render(spec) if o["kind"] == "PyTorchJob")
    assert job["spec"]["runPolicy"]["backoffLimit"] == limit
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert sorted(replicas) == (["Master", "Worker"] if nodes == 2 else ["Master"])
    for r in replicas.values():
        assert r["restartPolicy"] == expected
        assert r["template"]["spec"]["restartPolicy"] == expected


def test_rayjob_pods_never_restart_in_place():
    spec = load_spec(str(EXP3), ["backend=rayjob", "run_policy.backoff_limit=2"])
    job = next(o for o in render(spec) if o["kind"] == "RayJob")
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    assert {p["spec"]["restartPolicy"] for p in pods} == {"Never"}
