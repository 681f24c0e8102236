"""In-pod tracker set-up: which MLflow (and W&B) run this attempt logs to, so a resumed run continues it.

verl creates its trackers itself (`verl.utils.tracking.Tracking`, inside the TaskRunner actor) from
`trainer.logger` and the environment: `MLFLOW_TRACKING_URI`, `MLFLOW_RUN_ID` (attach to that run,
else `set_experiment(project_name)` + a new run named `experiment_name`), `TENSORBOARD_DIR`,
`WANDB_*`. The pod template carries the static settings (`render.env.tracking_env`); this module
chooses the run, once per attempt, before verl starts:

- **MLflow.** The run of a checkpoint lineage is recorded on the run's volume, in
  `<checkpoint path>/tracking/mlflow-run.json` (`{"tracking_uri", "experiment_id", "run_id"}`), next to
  the checkpoints a resume reads. With `trainer.resume_mode` auto or resume_path the recorded run is
  reused when it still exists on the same server; failing that (the record was lost), the newest run
  of the experiment tagged `grpo.launcher.io/checkpoint-path=<checkpoint path>` is. Otherwise
  (resume disabled: training starts at step 1) a new run is created in `tracking.mlflow.experiment`,
  named `tracking.mlflow.run_name`, tagged with the job name, experiment, config hash and checkpoint
  path, and recorded. The run id reaches verl as `MLFLOW_RUN_ID` in the child's environment and, for
  actors on other Ray nodes, through Ray's job runtime_env (`ray_overrides`).
- **W&B.** `WANDB_RUN_ID` is derived from the checkpoint path (deterministic, so a resumed attempt
  names the same run) with `WANDB_RESUME=allow`; a run with resume disabled gets the attempt in it.

If the MLflow server cannot be reached the entrypoint says so and leaves `MLFLOW_RUN_ID` unset:
verl then retries on its own and, failing that, trains without MLflow (its documented behaviour).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from launcher.spec.model import ExperimentSpec

RECORD_NAME = "mlflow-run.json"
TAG_JOB = "grpo.launcher.io/job"
TAG_EXPERIMENT = "grpo.launcher.io/experiment"
TAG_CONFIG_HASH = "grpo.launcher.io/config-hash"
TAG_CHECKPOINT = "grpo.launcher.io/checkpoint-path"
TAG_ATTEMPT = "grpo.launcher.io/attempt"
TAG_SOURCE = "grpo.launcher.io/source"


def record_path(spec: ExperimentSpec) -> Path:
    """Where the MLflow run of this experiment's checkpoints is recorded (on the run's volume)."""
    return Path(spec.checkpoint_path) / "tracking" / RECORD_NAME


@dataclass(frozen=True)
class MlflowRun:
    """The run this attempt logs to and how it was chosen ("recorded", "tagged" or "created")."""

    run_id: str
    experiment_id: str
    how: str


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("run_id"), str) else None


def _write_record(path: Path, record: dict[str, Any]) -> None:
    from launcher.run.dirs import write_atomic

    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def resolve_mlflow_run(spec: ExperimentSpec, *, attempt: str, client: Any = None,
                       record: Path | None = None) -> MlflowRun:
    """Find (resume) or create the MLflow run for this attempt; see the module docstring for the rule.

    `client` is an `mlflow.MlflowClient` for `tracking.mlflow.tracking_uri` (made here when None).
    Raises whatever the client raises when the server cannot be reached.
    """
    uri = spec.tracking.mlflow.tracking_uri
    if client is None:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
    record = record or record_path(spec)
    resume = spec.trainer.resume_mode != "disable"
    exp = client.get_experiment_by_name(spec.mlflow_experiment)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(spec.mlflow_experiment)
    if resume:
        rec = _read_record(record)
        if rec and rec.get("tracking_uri") == uri:
            try:
                run = client.get_run(rec["run_id"])
            except Exception:  # deleted, or another server's id: fall through to the tag
                run = None
            if run is not None and run.info.lifecycle_stage == "active":
                return MlflowRun(run.info.run_id, run.info.experiment_id, "recorded")
        found = client.search_runs(
            [exp_id], filter_string=f"tags.`{TAG_CHECKPOINT}` = '{_quote(spec.checkpoint_path)}'",
            order_by=["attributes.start_time DESC"], max_results=1)
        if found:
            run = found[0]
            _write_record(record, {"tracking_uri": uri, "experiment_id": run.info.experiment_id,
                                   "run_id": run.info.run_id})
            return MlflowRun(run.info.run_id, run.info.experiment_id, "tagged")
    run = client.create_run(exp_id, run_name=spec.mlflow_run_name, tags={
        TAG_JOB: spec.job_name, TAG_EXPERIMENT: spec.name, TAG_CONFIG_HASH: spec.config_hash(),
        TAG_CHECKPOINT: spec.checkpoint_path, TAG_ATTEMPT: attempt, TAG_SOURCE: "pod",
    })
    _write_record(record, {"tracking_uri": uri, "experiment_id": exp_id, "run_id": run.info.run_id})
    return MlflowRun(run.info.run_id, exp_id, "created")


def _quote(text: str) -> str:
    # MLflow's search grammar: a single-quoted string, with ' escaped by doubling is not supported;
    # the checkpoint path is an AbsPath, so refuse the one character it cannot carry.
    if "'" in text:
        raise ValueError(f"cannot search MLflow for a value with a quote: {text!r}")
    return text


def wandb_run_id(spec: ExperimentSpec, attempt: str) -> str:
    """A deterministic W&B run id: the checkpoint lineage's (resume) or this attempt's (fresh start)."""
    key = spec.checkpoint_path if spec.trainer.resume_mode != "disable" else f"{spec.checkpoint_path}@{attempt}"
    return f"{spec.name[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def tracking_env(spec: ExperimentSpec, *, attempt: str, resolve: Callable[..., MlflowRun] = resolve_mlflow_run,
                 log: Callable[[str], None] = print, dry_run: bool = False) -> dict[str, str]:
    """Variables to add for the trackers of this attempt (MLFLOW_RUN_ID, WANDB_RUN_ID/WANDB_RESUME).

    `dry_run` touches no network (MLFLOW_RUN_ID is then left out and said so).
    """
    env: dict[str, str] = {}
    loggers = spec.loggers
    if "mlflow" in loggers and spec.tracking.mlflow.tracking_uri:
        if dry_run:
            log(f"mlflow: {spec.tracking.mlflow.tracking_uri} experiment {spec.mlflow_experiment!r}; the run is "
                f"chosen at start ({record_path(spec)})")
        else:
            try:
                run = resolve(spec, attempt=attempt)
            except Exception as exc:  # the server is down or refuses: verl retries, then trains without it
                log(f"warning: mlflow: cannot reach {spec.tracking.mlflow.tracking_uri} ({type(exc).__name__}: "
                    f"{exc}); verl will try again itself")
            else:
                env["MLFLOW_RUN_ID"] = run.run_id
                log(f"mlflow: run {run.run_id} ({run.how}) in experiment {spec.mlflow_experiment!r} at "
                    f"{spec.tracking.mlflow.tracking_uri}")
    if "wandb" in loggers:
        env["WANDB_RUN_ID"] = wandb_run_id(spec, attempt)
        env["WANDB_RESUME"] = "allow"
    if "tensorboard" in loggers and not dry_run:
        try:
            Path(spec.tensorboard_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log(f"warning: tensorboard: cannot create {spec.tensorboard_dir} ({exc})")
    return env


# Variables verl's actors on other Ray nodes must see: passed in Ray's job runtime_env.
RUNTIME_ENV_VARS = ("MLFLOW_RUN_ID", "WANDB_RUN_ID", "WANDB_RESUME")


def ray_overrides(env: Mapping[str, str]) -> list[str]:
    """Hydra overrides adding the per-attempt tracker variables to verl's Ray runtime_env.

    verl merges `ray_kwargs.ray_init.runtime_env` over its own defaults and passes it to `ray.init`
    (verl/trainer/main_ppo.py), so every actor of the job, on any node, gets these variables.
    """
    from launcher.spec.verl import hydra_value

    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={hydra_value(env[k])}"
            for k in RUNTIME_ENV_VARS if k in env]
