"""Pod-side tracking under real verl 0.9.1: the tracker overrides compose and validate in verl's Hydra config,
and verl's own `Tracking` (verl/utils/tracking.py), run as the entrypoint's child with the environment the
entrypoint produces (the pod template's values + `env_for` + the tracker set-up), logs to a real MLflow
server (the session fixture `mlflow_uri`, loopback) and to TensorBoard event files; read back with MLflow's
client and TensorBoard's EventAccumulator. On CPU: no training, one logged step per attempt."""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from pathlib import Path

import yaml
from mlflow import MlflowClient

from entrypoint_support import standin_config
from launcher.spec.load import load_spec
from launcher.entrypoint import tracking as TR
from launcher.entrypoint.__main__ import main as entrypoint_main
from launcher.entrypoint.environment import ContainerProbe
from launcher.export.mlflow_export import mlflow_key
from launcher.render.manifests import render
from launcher.spec.verl import verl_overrides
from verl_harness import compose, validate

ROOT = Path(__file__).resolve().parents[2]
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"
PROBE = ContainerProbe(cpus=2, memory_bytes=8 << 30, shm_bytes=1 << 30)

CHILD = '''
import json, os, sys
from verl.utils.tracking import Tracking
step, project, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
t = Tracking(project_name=project, experiment_name=name, default_backend=["console", "mlflow", "tensorboard"],
             config={"trainer": {"project_name": project}})
assert "mlflow" in t.logger, "verl started without mlflow"
t.log(data={"critic/score/mean": 0.25 * step, "val-core/openai/gsm8k/acc/mean@1": 0.5}, step=step)
# before finish(): mlflow.end_run() removes MLFLOW_RUN_ID from the environment
print("CHILD-ENV", json.dumps({k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "TENSORBOARD_DIR")}))
t.finish()
sys.exit(int(sys.argv[4]))  # the first attempt "crashes" after its step: the pod is restarted, not finished
'''


def _spec_file(tmp_path: Path, uri: str, experiment: str) -> Path:
    path = standin_config(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["storage"] = {"mount_path": str(tmp_path)}
    raw["trainer"]["resume_mode"] = "auto"
    raw["tracking"] = {"mlflow": {"enabled": True, "tracking_uri": uri, "experiment": experiment},
                       "tensorboard": {"enabled": True}}
    path.write_text(yaml.safe_dump(raw))
    return path


def _pod_env(spec) -> dict[str, str]:
    """The trainer container's plain-value environment, as the kubelet would set it."""
    job = render(spec)[-1]
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {"POD_NAME": "exp-master-0", "POD_NAMESPACE": "default", "POD_IP": "127.0.0.1", "PATH": "/usr/bin:/bin"}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"].replace("$(POD_NAME)", env["POD_NAME"])
    return env


def test_tracker_overrides_compose_and_validate_in_verl():
    spec = load_spec(EXP3, ["tracking.mlflow.enabled=true", "tracking.mlflow.tracking_uri=http://mlflow:5000",
                            "tracking.tensorboard.enabled=true", "tracking.wandb.enabled=true",
                            "tracking.wandb.api_key={name: w, key: k}"])
    extra = TR.ray_overrides({"MLFLOW_RUN_ID": "0e12", "WANDB_RUN_ID": "grpo-exp3-abc", "WANDB_RESUME": "allow"})
    cfg = compose([*verl_overrides(spec), *extra])
    assert list(cfg.trainer.logger) == ["console", "file", "mlflow", "tensorboard", "wandb"]
    env_vars = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert dict(env_vars) == {"MLFLOW_RUN_ID": "0e12", "WANDB_RUN_ID": "grpo-exp3-abc", "WANDB_RESUME": "allow"}
    assert validate(cfg) == (False, False)
    # verl merges it over its own runtime_env defaults for ray.init (verl/trainer/main_ppo.py)
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    merged = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    assert merged.env_vars.MLFLOW_RUN_ID == "0e12" and "VLLM_LOGGING_LEVEL" in merged.env_vars


def test_mlflow_key_sanitizing_matches_verls_own():
    from verl.utils.tracking import _MlflowLoggingAdapter

    adapter = _MlflowLoggingAdapter()
    for key in ("val-core/openai/gsm8k/acc/mean@1", "a//b", "x(y)", "timing_s/step", "perf/throughput"):
        assert mlflow_key(key) == adapter._sanitize_key(key)


def test_verls_tracking_logs_to_the_mlflow_server_with_the_entrypoints_environment(mlflow_uri, tmp_path, capfd):
    from tensorboard.backend.event_processing import event_accumulator as ea

    experiment = f"verl-{uuid.uuid4().hex[:8]}"
    config = _spec_file(tmp_path, mlflow_uri, experiment)
    spec = load_spec(config)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    client = MlflowClient(tracking_uri=mlflow_uri)
    run_ids = []
    # the first attempt fails after logging step 1 (a finished run would not be started again: entrypoint.resume);
    # the second is its restarted pod (resume_mode auto)
    for attempt, step, code in (("attempt-1", 1, 1), ("attempt-2", 2, 0)):
        env = {**_pod_env(spec), "LAUNCHER_ATTEMPT": attempt,
               "LAUNCHER_CHILD_CMD": shlex.join([sys.executable, str(script), str(step),
                                                 spec.trainer.project_name, spec.name, str(code)])}
        assert entrypoint_main(["--config", str(config)], container_env=env, probe=PROBE,
                               prepare=lambda *a, **k: None) == code
        out = capfd.readouterr().out
        child_env = json.loads(out.split("CHILD-ENV ", 1)[1].splitlines()[0])
        assert child_env["MLFLOW_TRACKING_URI"] == mlflow_uri
        assert child_env["TENSORBOARD_DIR"] == f"{spec.checkpoint_path}/tensorboard"
        record = json.loads(TR.record_path(spec).read_text())
        assert child_env["MLFLOW_RUN_ID"] == record["run_id"]
        run_ids.append(record["run_id"])
    assert run_ids[0] == run_ids[1], "the resumed attempt must continue the same MLflow run"
    run = client.get_run(run_ids[0])
    assert client.get_experiment(run.info.experiment_id).name == experiment and run.info.run_name == spec.name
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_ids[0], "critic/score/mean"))
    assert history == [(1, 0.25), (2, 0.5)]
    assert [m.value for m in client.get_metric_history(run_ids[0], mlflow_key("val-core/openai/gsm8k/acc/mean@1"))] \
        == [0.5, 0.5]
    assert len(client.search_runs([run.info.experiment_id])) == 1
    acc = ea.EventAccumulator(f"{spec.checkpoint_path}/tensorboard", size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert sorted((e.step, e.value) for e in acc.Scalars("critic/score/mean")) == [(1, 0.25), (2, 0.5)]


def test_smoke_workload_logs_through_verls_tracking(tmp_path, monkeypatch):
    """The smoke driver's tracker (entrypoint/smoke.open_tracker) is verl's Tracking; its steps land in TensorBoard."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    from launcher.entrypoint import smoke as SMOKE

    spec = load_spec(ROOT / "configs" / "smoke-cpu.yaml", ["tracking.tensorboard.enabled=true"])
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    report = SMOKE.Report()
    tracker = SMOKE.open_tracker(spec, report)
    assert tracker is not None and "tensorboard" in tracker.logger and not report.failed()
    SMOKE._steps(spec, report, None, ray_part=None, world=1, print_metrics=True, tracker=tracker)
    checks = {c.name: c for c in report.checks}
    assert checks["tracking"].ok and "3 step(s) logged through verl's Tracking (tensorboard)" in checks["tracking"].line()
    acc = ea.EventAccumulator(str(tmp_path / "tb"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("timing_s/step")] == [1, 2, 3]
    assert [e.value for e in acc.Scalars("smoke/world_size")] == [1.0, 1.0, 1.0]
    # no tracker configured: nothing opened
    assert SMOKE.open_tracker(load_spec(ROOT / "configs" / "smoke-cpu.yaml"), SMOKE.Report()) is None
