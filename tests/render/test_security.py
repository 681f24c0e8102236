"""Pod security and secret handling of everything the launcher renders (the chart mirrors it: parity)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.errors import BadInput
from launcher.render.manifests import render

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"
WRITABLE = {"/tmp", "/home/verl", "/dev/shm", "/workspace"}
SECRETS = ["secrets.hf_token={name: hf, key: token}", "secrets.wandb_api_key={name: wandb, key: api-key}",
           "secrets.ray_auth_token={name: ray, key: token}", "secrets.image_pull_secrets=[regcred]",
           "trainer.logger=[console, wandb]"]


def _pod_specs(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    rc = job["spec"]["rayClusterSpec"]
    return ([rc["headGroupSpec"]["template"]["spec"], job["spec"]["submitterPodTemplate"]["spec"]]
            + [g["template"]["spec"] for g in rc["workerGroupSpecs"]])


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_every_pod_is_locked_down(backend):
    job = render(load_spec(EXP3, ["resources.nodes=2", *SECRETS], backend))[-1]
    for pod in _pod_specs(job):
        assert pod["automountServiceAccountToken"] is False  # training pods never call the API
        sc = pod["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000 and sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod.get("initContainers", []) + pod["containers"]:
            csc = c["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False and csc["privileged"] is False
            assert csc["readOnlyRootFilesystem"] is True and csc["capabilities"] == {"drop": ["ALL"]}
            # Writable places are volumes, and only these.
            for m in c["volumeMounts"]:
                assert m["mountPath"] in WRITABLE or m.get("readOnly") is True, m
                assert "hostPath" not in volumes[m["name"]]
            for e in c["env"]:
                assert "value" in e or "valueFrom" in e
                if e["name"] in ("HF_TOKEN", "WANDB_API_KEY", "RAY_AUTH_TOKEN"):
                    assert set(e) == {"name", "valueFrom"} and "secretKeyRef" in e["valueFrom"], e


def test_exceptions_are_config_fields():
    pod = _pod_specs(render(load_spec(EXP3, ["security.extra_capabilities=[SYS_PTRACE]",
                                             "security.read_only_root_filesystem=false"]))[-1])[0]
    csc = pod["containers"][0]["securityContext"]
    assert csc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert csc["readOnlyRootFilesystem"] is False
    with pytest.raises(BadInput, match="security.extra_capabilities"):
        load_spec(EXP3, ["security.extra_capabilities=[SYS_ADMIN]"])  # not an allowed exception
    with pytest.raises(BadInput, match="security.run_as_user: expected a number ≥ 1, got 0"):
        load_spec(EXP3, ["security.run_as_user=0"])  # root is not an option


@pytest.mark.parametrize("value", ["hf_abcdefghijklmnop", "{name: hf, key: token, value: hf_abcdefghijklmnop}"])
def test_a_secret_value_cannot_be_put_in_a_config(value):
    with pytest.raises(BadInput) as info:
        load_spec(EXP3, [f"secrets.hf_token={value}"])
    # ...and the refusal itself does not repeat the value
    assert "hf_abcdefghijklmnop" not in str(info.value)
