"""The launcher only touches objects that carry its labels.

A PyTorchJob (and a ConfigMap named like a run's) created by someone else in the same namespace is
refused by every verb that takes a name, left out of `list`, and survives `delete` of a real run.
"""
from __future__ import annotations

import json

import pytest
import yaml

import kwok_support as ks
from launcher_helpers import CONFIG, run_launcher

pytestmark = pytest.mark.cluster


def test_foreign_objects_are_never_touched(kube_cluster, namespace, tmp_path):
    info, ns, runs = kube_cluster, namespace, tmp_path / "runs"
    foreign = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "someone-elses-job", "namespace": ns, "labels": {"team": "other"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
            "metadata": {"annotations": {ks.POD_COMPLETE_DELAY: "600s"}},
            "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}}}},
    }
    info.kubectl("apply", "-f", "-", input=yaml.safe_dump(foreign))
    for verb in (["status"], ["wait", "--timeout", "5"], ["logs"], ["delete"]):
        rc, out, err = run_launcher([verb[0], "someone-elses-job", "-n", ns, *verb[1:]], info, runs)
        assert rc == 2 and "was not created by the launcher" in err, (verb, out, err)

    ann = json.dumps({ks.POD_COMPLETE_DELAY: "5s"})
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, "--set", f"scheduling.pod_annotations={ann}"], info, runs)
    assert rc == 0, err
    job = next(runs.iterdir()).name
    # A look-alike ConfigMap without our labels, next to the run's own.
    info.kubectl("create", "configmap", f"{job}-spec-copy", "-n", ns, "--from-literal=x=y")
    rc, out, err = run_launcher(["list", "-n", ns], info, runs)
    assert rc == 0 and job in out and "someone-elses-job" not in out
    rc, out, err = run_launcher(["delete", job, "-n", ns], info, runs, timeout=180)
    assert rc == 0, err
    assert info.kubectl("get", "pytorchjob", "someone-elses-job", "-n", ns, "-o", "name").stdout.strip()
    assert info.kubectl("get", "configmap", f"{job}-spec-copy", "-n", ns, "-o", "name").stdout.strip()
    assert not info.kubectl("get", "configmap", f"{job}-spec", "-n", ns, "--ignore-not-found", "-o",
                            "name").stdout.strip()
