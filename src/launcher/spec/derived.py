"""What the spec derives from its fields (paths, counts, the config hash): mixins of the sections in
`launcher.spec.model`, kept apart so the model file holds the fields alone.
"""

from __future__ import annotations

import hashlib
from typing import Any

from launcher.spec.names import HASH_LEN

# Sections added after configs were already being hashed: left out of the canonical form (`canonical_data`) while
# they hold only their defaults, so a config that does not use one keeps its config hash (its job name, its
# checkpoint path, what a resubmission resumes). The chart leaves them out the same way (hack/gen_chart.py).
OMITTED_WHILE_DEFAULT = ("reward", "verl", "health")
# Fields added to a section that was already hashed: left out while null, for the same reason.
OMITTED_WHILE_NULL = ("reward.function.source",)


class DataDerived:
    """The data section's derived paths. (`model.DataSpec`.)"""

    __slots__ = ()

    @property
    def train_path(self) -> str:
        return self.train_files or f"{self.dir}/train.parquet"

    @property
    def val_path(self) -> str:
        return self.val_files or f"{self.dir}/test.parquet"


class TrainerDerived:
    """The trainer section's derived values. (`model.TrainerSpec`.)"""

    __slots__ = ()

    @property
    def effective_save_freq(self) -> int:
        return self.total_training_steps if self.save_freq is None else self.save_freq


class ResourcesDerived:
    """GPU and worker counts derived from the resources section. (`model.ResourcesSpec`.)"""

    __slots__ = ()

    @property
    def workers_per_node(self) -> int:
        """Data-parallel workers per pod for verl's batch arithmetic: its GPUs, or 1 for a CPU-only pod.

        CPU training runs one trainer process per pod (`trainer.n_gpus_per_node=1`); the smoke workload
        validates verl's config with the same substitution, and `check_rules` uses the same count.
        """
        return self.gpus_per_node or 1

    @property
    def cpu_only(self) -> bool:
        return self.gpus_per_node == 0


class ExperimentDerived:
    """Names, paths and trackers derived from the whole spec. (`model.ExperimentSpec`.)"""

    __slots__ = ()

    def canonical_data(self) -> dict[str, Any]:
        """The spec as the JSON data its hash, the ConfigMap and `spec.yaml` carry: `model_dump(mode="json")`
        without the sections of OMITTED_WHILE_DEFAULT that hold only their defaults and the fields of
        OMITTED_WHILE_NULL that are null (reading it back gives the same spec)."""
        data = self.model_dump(mode="json")
        for dotted in OMITTED_WHILE_NULL:
            *parents, key = dotted.split(".")
            node = data
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict) and key in node and node[key] is None:
                del node[key]
        for name in OMITTED_WHILE_DEFAULT:
            default = type(self).model_fields[name].get_default(call_default_factory=True)
            if data[name] == default.model_dump(mode="json"):
                del data[name]
        return data

    def config_hash(self) -> str:
        """Short content hash of the whole spec: a changed config is a new run (and job name).

        The canonical text is Go's `encoding/json` form (`launcher.spec.canonical`) of `canonical_data()`, so that
        the Helm chart computes the same hash with `toJson | sha256sum` (charts/grpo-exp3,
        tests/chart/test_chart_parity.py).
        """
        from launcher.spec import canonical

        return hashlib.sha256(canonical.dumps(self.canonical_data()).encode()).hexdigest()[:HASH_LEN]

    @property
    def job_name(self) -> str:
        return f"{self.name}-{self.config_hash()}"

    @property
    def cpu_training(self) -> bool:
        """verl's real GRPO trainer on CPU-only pods (workload grpo, resources.gpus_per_node 0): the override list,
        the pod environment and Ray's resources get what verl needs on CPU (docker/verl-cpu/README.md §2)."""
        return self.workload == "grpo" and self.resources.gpus_per_node == 0

    @property
    def ray_gpus_per_node(self) -> int:
        """The GPUs each pod's raylet declares: its GPUs, or one logical GPU for CPU training (verl's resource
        pools ask Ray for "GPU"; the verl CPU platform runs one trainer process on it)."""
        return 1 if self.cpu_training else self.resources.gpus_per_node

    @property
    def verl_starts_ray(self) -> bool:
        """True when verl's `ray.init` starts a Ray of its own inside the pod (one PyTorchJob/TrainJob pod); False
        when it attaches to a cluster (a RayJob's, or the multi-node head's), where ray.init refuses resources."""
        return self.backend != "rayjob" and self.resources.nodes == 1

    @property
    def checkpoint_path(self) -> str:
        """Per-run checkpoint directory (`<checkpoint_dir>/<project_name>/<job name>`): the job name carries the
        config hash, so a run resumes only its own steps and two different configs never share a directory."""
        return f"{self.trainer.checkpoint_dir}/{self.trainer.project_name}/{self.job_name}"

    @property
    def loggers(self) -> list[str]:
        """verl's `trainer.logger`: the configured list plus every enabled tracker, in a stable order."""
        out = list(self.trainer.logger)
        tr = self.tracking
        for name, on in (("mlflow", tr.mlflow.enabled), ("tensorboard", tr.tensorboard.enabled),
                         ("wandb", tr.wandb.enabled)):
            if on and name not in out:
                out.append(name)
        return out

    @property
    def tensorboard_dir(self) -> str:
        """TENSORBOARD_DIR in the pods (on the run's volume)."""
        return self.tracking.tensorboard.log_dir or f"{self.checkpoint_path}/tensorboard"

    @property
    def mlflow_experiment(self) -> str:
        """The MLflow experiment: tracking.mlflow.experiment, else verl's choice (the project name)."""
        return self.tracking.mlflow.experiment or self.trainer.project_name

    @property
    def mlflow_run_name(self) -> str:
        """The MLflow run name: tracking.mlflow.run_name, else verl's choice (the experiment's name)."""
        return self.tracking.mlflow.run_name or self.name

    @property
    def wandb_api_key(self) -> Any:
        """The W&B key's Secret reference: tracking.wandb.api_key, else secrets.wandb_api_key (or None)."""
        return self.tracking.wandb.api_key or self.secrets.wandb_api_key

