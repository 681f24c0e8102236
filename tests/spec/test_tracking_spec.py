"""The tracking section and the `env:` list: validation, rendering (secrets only as references), the
entrypoint's tracker variables, and the reserved-name list kept in step with the code that sets them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.spec.load import load_spec
from launcher.entrypoint import environment as E
from launcher.entrypoint import tracking as TR
from launcher.errors import BadInput
from launcher.render.manifests import render
from launcher.spec.names import RESERVED_ENV, RESERVED_ENV_PREFIX
from launcher.spec.verl import verl_overrides

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"
MLFLOW = ["tracking.mlflow.enabled=true", "tracking.mlflow.tracking_uri=http://mlflow.team-a.svc:5000"]
ALL_TRACKING = [
    *MLFLOW,
    "tracking.mlflow.username={name: mlflow-auth, key: user}",
    "tracking.mlflow.password={name: mlflow-auth, key: password}",
    "tracking.mlflow.token={name: mlflow-auth, key: token}",
    "tracking.tensorboard.enabled=true",
    "tracking.wandb.enabled=true", "tracking.wandb.entity=team-a", "tracking.wandb.base_url=https://wandb.example",
    "tracking.wandb.api_key={name: wandb, key: api-key}",
    "secrets.hf_token={name: hf, key: token}", "secrets.ray_auth_token={name: ray, key: token}",
    "env=[{name: HTTPS_PROXY, value: 'http://proxy:3128'}, {name: EXTRA_TOKEN, secret_key_ref: {name: extra, key: t}},"
    " {name: NCCL_P2P_LEVEL, config_map_key_ref: {name: nccl, key: p2p}}]",
]


def _containers(job: dict) -> list[dict]:
    if job["kind"] == "PyTorchJob":
        specs = [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    else:
        rc = job["spec"]["rayClusterSpec"]
        specs = [rc["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in rc["workerGroupSpecs"]]
    return [c for s in specs for c in s.get("initContainers", []) + s["containers"]]


def _validate(tmp_path, capsys, sets: list[str]) -> tuple[int, str]:
    args = ["validate", str(EXP3)]
    for s in sets:
        args += ["--set", s]
    rc = main(args)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(RESERVED_ENV) + ["LAUNCHER_CHILD_CMD", "LAUNCHER_ATTEMPT"])
def test_env_refuses_every_launcher_owned_name(name, tmp_path, capsys):
    rc, err = _validate(tmp_path, capsys, [f"env=[{{name: OK_VAR, value: a}}, {{name: {name}, value: x}}]"])
    assert rc == 2, err
    assert f"env[1].name: expected a variable the launcher does not set itself" in err and repr(name) in err


def test_env_items_need_exactly_one_source_and_unique_names(tmp_path, capsys):
    rc, err = _validate(tmp_path, capsys, [
        "env=[{name: A}, {name: B, value: x, secret_key_ref: {name: s, key: k}}, {name: C, value: '1'}, {name: C, value: '2'}]"])
    assert rc == 2
    assert "env[0]: expected exactly one of value, secret_key_ref, config_map_key_ref, got 'none'" in err
    assert "env[1]: expected exactly one of value, secret_key_ref, config_map_key_ref, got 'value, secret_key_ref'" in err
    assert "env[3].name: expected a name not already listed in env, got 'C'" in err


def test_env_name_must_be_an_identifier(tmp_path, capsys):
    rc, err = _validate(tmp_path, capsys, ["env=[{name: 'BAD-NAME', value: x}]"])
    assert rc == 2 and "env.0.name" in err and "BAD-NAME" in err


def test_a_pasted_token_in_a_tracking_secret_field_is_refused_and_not_echoed(tmp_path, capsys):
    rc, err = _validate(tmp_path, capsys, [*MLFLOW, "tracking.mlflow.token=sk-live-0123456789"])
    assert rc == 2 and "tracking.mlflow.token" in err and "sk-live-0123456789" not in err and "<redacted str>" in err
    rc, err = _validate(tmp_path, capsys, ["env=[{name: X, secret_key_ref: hunter2}]"])
    assert rc == 2 and "env.0.secret_key_ref" in err and "hunter2" not in err


@pytest.mark.parametrize("sets, field, expected", [
    (["trainer.logger=[console, mlflow]"], "tracking.mlflow.tracking_uri", "a tracking server URI"),
    (["tracking.mlflow.enabled=true"], "tracking.mlflow.tracking_uri", "a tracking server URI"),
    ([*MLFLOW[:1], "tracking.mlflow.tracking_uri=http://user:pw@mlflow:5000"], "tracking.mlflow.tracking_uri",
     "a string matching"),
    ([*MLFLOW, "tracking.mlflow.password={name: a, key: b}"], "tracking.mlflow.username", "a Secret reference"),
    (["tracking.tensorboard.enabled=true", "tracking.tensorboard.log_dir=/tmp/tb"], "tracking.tensorboard.log_dir",
     "a directory under storage.mount_path"),
    (["tracking.wandb.enabled=true"], "tracking.wandb.api_key", "a Secret reference"),
    (["tracking.wandb.enabled=true", "tracking.wandb.api_key={name: a, key: b}",
      "secrets.wandb_api_key={name: c, key: d}"], "tracking.wandb.api_key", "one W&B key reference"),
])
def test_tracking_problems_name_the_field(sets, field, expected, tmp_path, capsys):
    rc, err = _validate(tmp_path, capsys, sets)
    assert rc == 2 and f"{field}: expected {expected}" in err, err


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_tracking_and_env_render_secrets_only_as_references(backend):
    spec = load_spec(EXP3, ALL_TRACKING, backend)
    objects = render(spec)
    text = json.dumps(objects)
    for c in _containers(objects[-1]):
        env = {e["name"]: e for e in c["env"]}
        assert env["MLFLOW_TRACKING_URI"] == {"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow.team-a.svc:5000"}
        assert env["MLFLOW_EXPERIMENT_NAME"]["value"] == spec.trainer.project_name
        assert env["TENSORBOARD_DIR"]["value"] == f"{spec.checkpoint_path}/tensorboard"
        assert env["WANDB_ENTITY"]["value"] == "team-a" and env["WANDB_BASE_URL"]["value"] == "https://wandb.example"
        for var, (name, key) in {"MLFLOW_TRACKING_USERNAME": ("mlflow-auth", "user"),
                                 "MLFLOW_TRACKING_PASSWORD": ("mlflow-auth", "password"),
                                 "MLFLOW_TRACKING_TOKEN": ("mlflow-auth", "token"),
                                 "WANDB_API_KEY": ("wandb", "api-key"), "EXTRA_TOKEN": ("extra", "t")}.items():
            assert env[var] == {"name": var, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}
        assert env["NCCL_P2P_LEVEL"] == {"name": "NCCL_P2P_LEVEL",
                                         "valueFrom": {"configMapKeyRef": {"name": "nccl", "key": "p2p"}}}
        assert env["HTTPS_PROXY"] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
        # every secret-named variable is a reference, never a value
        for e in c["env"]:
            if E.is_secret_name(e["name"]):
                assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
    # the ConfigMap's spec holds the references (names and keys), no value came from anywhere else
    assert "sk-" not in text


def test_trackers_join_verls_logger_list():
    spec = load_spec(EXP3, ALL_TRACKING)
    assert spec.loggers == ["console", "file", "mlflow", "tensorboard", "wandb"]
    assert "trainer.logger=[console,file,mlflow,tensorboard,wandb]" in verl_overrides(spec)
    assert "trainer.logger=[console,file]" in verl_overrides(load_spec(EXP3))


def test_reserved_names_cover_everything_the_launcher_sets():
    """RESERVED_ENV must list every variable render, the entrypoint and its tracker set-up produce."""
    spec = load_spec(EXP3, [*ALL_TRACKING, "network.nccl_socket_ifname=eth0", "model.offline=true",
                            "trainer.resume_mode=auto"])
    user = {v.name for v in spec.env}
    rendered = {e["name"] for o in (render(spec), render(spec.model_copy(update={"backend": "rayjob"})))
                for c in _containers(o[-1]) for e in c["env"]}
    probe = E.ContainerProbe(cpus=4, memory_bytes=1 << 34, shm_bytes=1 << 30)
    entry = set()
    cpu = load_spec(EXP3.parent / "grpo-exp3-cpu.yaml")  # CPU training adds the verl CPU platform's variables
    rendered |= {e["name"] for o in (render(cpu), render(cpu.model_copy(update={"backend": "rayjob"})))
                 for c in _containers(o[-1]) for e in c["env"]}
    for role in ("single-node", "ray-head", "ray-worker", "ray-job-driver"):
        for s in (spec, cpu):
            entry |= set(E.env_for(s, {"RAY_AUTH_TOKEN": "x"}, role=role, probe=probe))
            entry |= set(E.env_for(s, {}, role=role, probe=probe))
    fake = TR.MlflowRun("0123abcd", "1", "created")
    entry |= set(TR.tracking_env(spec, attempt="a", resolve=lambda s, attempt: fake, log=lambda m: None))
    # caches and TOKENIZERS_PARALLELISM honour a value already in the pod: they are the user's to set; so do CPU
    # training's KV cache size and dynamo switch, and its LD_PRELOAD keeps the pod's own preload
    user_settable = {"XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TOKENIZERS_PARALLELISM", "LD_PRELOAD",
                     "VLLM_CPU_KVCACHE_SPACE", "TORCHDYNAMO_DISABLE", "TQ_NUM_THREADS"}
    missing = {n for n in (rendered - user) | (entry - user_settable)
               if n not in RESERVED_ENV and not n.startswith(RESERVED_ENV_PREFIX)}
    assert not missing, f"add to spec.RESERVED_ENV: {sorted(missing)}"
    assert {"MLFLOW_RUN_ID", "WANDB_RUN_ID", "WANDB_RESUME", "VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES"} <= entry


def test_ray_overrides_carry_the_run_ids_to_every_actor():
    env = {"MLFLOW_RUN_ID": "1e5", "WANDB_RUN_ID": "exp-abc", "WANDB_RESUME": "allow", "OTHER": "x"}
    assert TR.ray_overrides(env) == [
        "+ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_RUN_ID='1e5'",  # quoted: Hydra would read a number
        "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RUN_ID=exp-abc",
        "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RESUME=allow",
    ]


def test_wandb_run_id_is_stable_across_resumed_attempts_and_fresh_otherwise():
    resumed = load_spec(EXP3, ["trainer.resume_mode=auto"])
    fresh = load_spec(EXP3, ["trainer.resume_mode=disable"])
    assert TR.wandb_run_id(resumed, "a1") == TR.wandb_run_id(resumed, "a2")
    assert TR.wandb_run_id(fresh, "a1") != TR.wandb_run_id(fresh, "a2")


def test_an_unreachable_mlflow_server_does_not_stop_the_pod():
    spec = load_spec(EXP3, MLFLOW)
    said = []

    def down(s, attempt):
        raise ConnectionError("connection refused")

    env = TR.tracking_env(spec, attempt="a", resolve=down, log=said.append)
    assert "MLFLOW_RUN_ID" not in env and "cannot reach http://mlflow.team-a.svc:5000" in said[0]


def test_export_flags_are_bad_input_before_anything(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    assert "expected --mlflow URI and/or --tensorboard DIR" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--mlflow", "http://u:p@host:5000"]) == 2
    assert "without user:password@" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--mlflow", "not a uri"]) == 2
    assert main(["submit", str(EXP3), "--mlflow", "http://h:5000", "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "expected --follow with them" in capsys.readouterr().err
    with pytest.raises(BadInput):
        from launcher.export.targets import check_export_arguments
        import argparse

        check_export_arguments(argparse.Namespace(mlflow=None, mlflow_experiment="x", tensorboard=None))
