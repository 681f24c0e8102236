"""No secret value leaks: not into the cluster's objects, the run directory, or any launcher output.

Real Secrets hold an HF token, MLflow credentials, a W&B key and a user `env:` secret; the run references
them (secrets, tracking.mlflow, tracking.wandb, env[].secret_key_ref). The user's kubeconfig carries a real
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
    tracking_values = {"mlflow-password": "mlflow_PASSWORD_must_not_leak_42", "mlflow-token": "mlflow_TOKEN_must_not_leak_42",
                       "wandb": "wandb_KEY_must_not_leak_0123456789abcdef", "extra": "extra_SECRET_must_not_leak_9"}
    info.kubectl("create", "secret", "generic", "trackers", "-n", ns, "--from-literal=user=mlflow-user",
                 *(f"--from-literal={k}={v}" for k, v in tracking_values.items()))
    user, _, token = launcher_user(info, ns, "launcher-user", tmp_path / "kubeconfig")
    runs = tmp_path / "runs"
    ann = json.dumps({ks.POD_COMPLETE_DELAY: "6s"})
    sets = ["--set", f"scheduling.pod_annotations={ann}", "--set", "secrets.hf_token={name: hf, key: token}",
            "--set", "tracking.mlflow.enabled=true", "--set", "tracking.mlflow.tracking_uri=http://mlflow.invalid:5000",
            "--set", "tracking.mlflow.username={name: trackers, key: user}",
            "--set", "tracking.mlflow.password={name: trackers, key: mlflow-password}",
            "--set", "tracking.mlflow.token={name: trackers, key: mlflow-token}",
            "--set", "tracking.wandb.enabled=true", "--set", "tracking.wandb.api_key={name: trackers, key: wandb}",
            "--set", "env=[{name: EXTRA_SECRET, secret_key_ref: {name: trackers, key: extra}}]"]
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
    # a value pasted where a reference belongs is refused without echoing it
    assert go("submit", CONFIG, "--set", "tracking.mlflow.enabled=true", "--set",
              "tracking.mlflow.tracking_uri=http://m:5000", "--set", "tracking.mlflow.token=" + tracking_values["mlflow-token"]) == 2
    assert go("submit", CONFIG, "--set", "env=[{name: X, secret_key_ref: " + tracking_values["extra"] + "}]") == 2
    assert go("validate", CONFIG, "--set", "env=[{name: WANDB_API_KEY, value: " + tracking_values["wandb"] + "}]") == 2
    # the launcher-side export reads the run directory only
    assert go("export", str(runs / job), "--tensorboard", str(tmp_path / "tb")) == 0

    live = info.kubectl("get", "pytorchjob", job, "-n", ns, "-o", "yaml").stdout
    assert "secretKeyRef" in live and hf not in live
    pod_env = json.loads(info.kubectl("get", "pytorchjob", job, "-n", ns, "-o", "json").stdout)[
        "spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in pod_env if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs == {"HF_TOKEN": {"name": "hf", "key": "token"}, "WANDB_API_KEY": {"name": "trackers", "key": "wandb"},
                    "MLFLOW_TRACKING_USERNAME": {"name": "trackers", "key": "user"},
                    "MLFLOW_TRACKING_PASSWORD": {"name": "trackers", "key": "mlflow-password"},
                    "MLFLOW_TRACKING_TOKEN": {"name": "trackers", "key": "mlflow-token"},
                    "EXTRA_SECRET": {"name": "trackers", "key": "extra"}}
    cms = info.kubectl("get", "configmaps", "-n", ns, "-o", "yaml").stdout
    written = [p.read_bytes().decode("utf-8", "replace") for p in [*runs.rglob("*"), *(tmp_path / "tb").rglob("*")]
               if p.is_file()]
    for text in [*outputs, *written, live, cms]:
        assert hf not in text and token not in text
        for value in tracking_values.values():
            assert value not in text
