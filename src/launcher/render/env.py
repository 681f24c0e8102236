"""The pods' environment: what every container of a run gets (the launcher's variables, verl's tracker settings,
Secret references, the user's own `env:`). Pure, like the rest of `launcher.render`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.spec.contract import SPEC_PATH

if TYPE_CHECKING:
    from launcher.spec.model import ExperimentSpec

HOME_DIR = "/home/verl"


def pod_env(spec: ExperimentSpec) -> list[dict]:
    """Every container's environment, in order: the launcher's own variables, verl's tracker settings, Secret
    references, then the user's `env:`."""
    env: list[dict] = [
        {"name": "LAUNCHER_SPEC", "value": SPEC_PATH},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": HOME_DIR},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        # Ray advertises this address to the other nodes of a multi-node run.
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NCCL_DEBUG", "value": spec.network.nccl_debug},
        {"name": "NCCL_IB_DISABLE", "value": "0" if spec.network.nccl_ib else "1"},
    ]
    if spec.network.nccl_socket_ifname:
        env.append({"name": "NCCL_SOCKET_IFNAME", "value": spec.network.nccl_socket_ifname})
    # Set on the pod, not only by the entrypoint: Ray workers on other pods (a RayJob's GPU group)
    # inherit the pod's environment, not the driver's.
    env += [
        {"name": "HF_HOME", "value": spec.model.cache_dir},
        {"name": "RAY_COLOR_PREFIX", "value": "0"},
        {"name": "RAY_DEDUP_LOGS", "value": "0"},
        # verl's file logger truncates its file when opened: one file per pod, so a retried run
        # (new pods, new names) never overwrites an earlier attempt's metrics.
        {"name": "VERL_FILE_LOGGER_PATH", "value": f"{spec.checkpoint_path}/metrics/$(POD_NAME).jsonl"},
    ]
    if spec.model.offline:
        env += [{"name": n, "value": "1"} for n in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")]
    env += tracking_env(spec)
    # Secrets reach the pod only as references to existing Secrets, never as values.
    mlf = spec.tracking.mlflow
    for var, ref in (("HF_TOKEN", spec.secrets.hf_token), ("WANDB_API_KEY", spec.wandb_api_key),
                     ("RAY_AUTH_TOKEN", spec.secrets.ray_auth_token),
                     ("MLFLOW_TRACKING_USERNAME", mlf.username if mlf.enabled else None),
                     ("MLFLOW_TRACKING_PASSWORD", mlf.password if mlf.enabled else None),
                     ("MLFLOW_TRACKING_TOKEN", mlf.token if mlf.enabled else None)):
        if ref is not None:
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    # The user's own variables come last; check_rules refused any name the launcher sets above.
    env += [user_env_var(v) for v in spec.env]
    return env


def tracking_env(spec: ExperimentSpec) -> list[dict]:
    """verl's tracker settings (verl/utils/tracking.py reads them from the environment).

    On the pod, not only in the entrypoint: verl's TaskRunner actor, which creates the trackers, may
    run on any Ray node, whose raylet inherited the pod's environment. The MLflow run id is chosen
    per attempt by the entrypoint (`entrypoint.tracking`) and reaches the actors through Ray's
    runtime_env.
    """
    tr, loggers, env = spec.tracking, spec.loggers, []
    if "mlflow" in loggers and tr.mlflow.tracking_uri:
        env += [{"name": "MLFLOW_TRACKING_URI", "value": tr.mlflow.tracking_uri},
                {"name": "MLFLOW_EXPERIMENT_NAME", "value": spec.mlflow_experiment}]
    if "tensorboard" in loggers:
        env.append({"name": "TENSORBOARD_DIR", "value": spec.tensorboard_dir})
    if "wandb" in loggers:
        if tr.wandb.entity:
            env.append({"name": "WANDB_ENTITY", "value": tr.wandb.entity})
        if tr.wandb.base_url:
            env.append({"name": "WANDB_BASE_URL", "value": tr.wandb.base_url})
    return env


def user_env_var(var) -> dict:
    """One `env:` item as a Kubernetes EnvVar: a value, or a secretKeyRef/configMapKeyRef (never the secret)."""
    if var.secret_key_ref is not None:
        ref = var.secret_key_ref
        return {"name": var.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
    if var.config_map_key_ref is not None:
        ref = var.config_map_key_ref
        return {"name": var.name, "valueFrom": {"configMapKeyRef": {"name": ref.name, "key": ref.key}}}
    return {"name": var.name, "value": var.value}
