"""Least-privilege RBAC on the real API server.

A ServiceAccount bound to what `launcher rbac` renders can run every launcher verb; with one
permission removed, the launcher names the missing permission in one line (exit 3), and the
half-done submit leaves nothing behind.
"""
from __future__ import annotations

import json

import pytest

import kwok_support as ks
from launcher_helpers import CONFIG, cri, run_launcher, verl_lines
from rbac_support import apply, launcher_user

pytestmark = pytest.mark.cluster


def test_every_verb_works_with_the_rendered_role_and_a_missing_permission_is_named(kube_cluster, namespace,
                                                                                   tmp_path):
    info, ns = kube_cluster, namespace
    user, objs, _ = launcher_user(info, ns, "launcher-user", tmp_path / "kubeconfig")

    ann = json.dumps({ks.POD_COMPLETE_DELAY: "8s"})
    submit = ["submit", CONFIG, "-n", ns, "--set", f"scheduling.pod_annotations={ann}"]
    rc, out, err = run_launcher(submit, user, tmp_path / "runs")
    assert rc == 0, err
    job = next((tmp_path / "runs").iterdir()).name
    ks.serve_logs(info, ns, f"{job}-master-0", cri(verl_lines(3)))
    for verb in (["status", job], ["list"], ["wait", job, "--timeout", "120"], ["logs", job], ["delete", job]):
        rc, out, err = run_launcher([*verb, "-n", ns], user, tmp_path / "runs", timeout=180)
        assert rc == 0, f"{verb}: {out}{err}"

    # Take one permission away: creating PyTorchJobs.
    role = objs[0]
    for rule in role["rules"]:
        if rule["resources"] == ["pytorchjobs"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    apply(info, [role])
    rc, out, err = run_launcher([*submit, "--set", "rollout.n=4"], user, tmp_path / "runs2")
    assert rc == 3, out + err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and 'cannot create resource "pytorchjobs" in API group "kubeflow.org"' in errors[0], err
    assert "rolled back: deleted ConfigMap" in err, err
    # The ConfigMap created before the refused job was rolled back.
    cms = info.kubectl("get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/part-of=grpo-launcher",
                       "-o", "name").stdout.split()
    assert cms == [], cms
