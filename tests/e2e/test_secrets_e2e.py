"""No secret value leaks: not into the cluster's objects, the run directory, or any launcher output.

A real Secret holds an HF token; the run references it. The user's kubeconfig carries a real
ServiceAccount token. Every verb, the failing ones too, is run and everything it printed or wrote
is searched for both.
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import CONFIG, cri, run_launcher, verl_lines
from rbac_support import launcher_user

pytestmark = pytest.mark.cluster


def test_secret_values_never_leak(kube_cluster, namespace, tmp_path):
    info, ns = kube_cluster, namespace
    hf = "hf_e2e_VALUE_that_must_not_leak_0123456789"
    info.kubectl("create", "secret", "generic", "hf", "-n", ns, f"--from-literal=token={hf}")
    user, _, token = launcher_user(info, ns, "launcher-user", tmp_path / "kubeconfig")
    runs = tmp_path / "runs"
    ann = json.dumps({ks.POD_COMPLETE_DELAY: "6s"})
    sets = ["--set", f"scheduling.pod_annotations={ann}", "--set", "secrets.hf_token={name: hf, key: token}"]
    outputs = []

    def go(*args, timeout=180):
        rc, out, err = run_launcher(list(args), user, runs, timeout=timeout)
        outputs.append(out + err)
        return rc

    assert go("submit", CONFIG, "-n", ns, *sets) == 0
    job = next(runs.iterdir()).name
    ks.serve_logs(info, ns, f"{job}-master-0", cri(verl_lines(3)))
    assert go("wait", job, "-n", ns, "--timeout", "120") == 0
    for args in (["status", job], ["logs", job], ["list"]):
        assert go(*args, "-n", ns) == 0
    assert go("report", str(runs / job)) == 0
    # Failures print the server and the object, never credentials.
    assert go("status", "no-such-run", "-n", ns) != 0
    assert go("submit", CONFIG, "-n", "namespace-that-does-not-exist", *sets) != 0
    assert go("submit", CONFIG, "--set", "secrets.hf_token=" + hf) == 2

    live = info.kubectl("get", "pytorchjob", job, "-n", ns, "-o", "yaml").stdout
    assert "secretKeyRef" in live and hf not in live
    written = [p.read_bytes().decode("utf-8", "replace") for p in runs.rglob("*") if p.is_file()]
    for text in outputs + written:
        assert hf not in text and token not in text
