"""The experiment spec: one pydantic model that every other artefact derives from.

Templates, the chart's `values.yaml`/`values.schema.json`, verl's override list and the docs are all
generated from (or checked against) this module. Field names follow verl's own names where a field
maps one-to-one onto a verl key, so a verl user recognises them.

Validation happens in two layers:
- field-level (types, ranges, formats) by pydantic, with `extra="forbid"` everywhere so a misspelled
  key is an error rather than silently ignored;
- cross-field rules (verl's batch arithmetic, Kubernetes name lengths) in `check_rules`, whose
  verdicts are meant to agree with verl's own `validate_config` (tests/verl prove it on a table).

Both layers report `Problem(field, expected, got)` (`launcher.spec.problems`), one line each. The derived
properties (paths, counts, the config hash) are the mixins of `launcher.spec.derived`; names and name
budgets live in `launcher.spec.names`; the constrained field types (quantities, DNS names, paths, text) in
`launcher.spec.types`.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from launcher.spec.derived import DataDerived, ExperimentDerived, ResourcesDerived, TrainerDerived
from launcher.spec.contract import BUILTIN_MODELS, BUILTIN_PREFIX, CPU_IMAGE_EXAMPLE, CPU_IMAGE_TAG_SUFFIX
from launcher.spec.gpu import GPU_PRODUCTS
from launcher.spec.types import (
    AbsPath,
    CONTROL_CHARS,
    AnnotationValue,
    DnsLabel,
    DnsSubdomain,
    EnvName,
    EnvValue,
    GpuLabelScheme,
    HydraOverride,
    LabelKey,
    LabelValue,
    Quantity,
    Text,
    TrackingName,
    TrackingUri,
)


class _Model(BaseModel):
    """Base for every section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class ModelSpec(_Model):
    """The policy model verl trains."""

    path: Text = Field(
        "Qwen/Qwen2.5-3B-Instruct",
        description="Hugging Face hub id, a path inside the pod, or builtin:<name>, a model the image carries "
        f"(nothing is downloaded): {', '.join(f'{BUILTIN_PREFIX}{n} ({m.description}, at {m.path})' for n, m in BUILTIN_MODELS.items())}.",
    )
    local_dir: AbsPath | None = Field(
        None,
        description="Pre-staged model directory for offline clusters; when set, verl loads it instead of `path` "
        "(null with a builtin: model).",
    )
    cache_dir: AbsPath = Field("/workspace/hf", description="HF_HOME inside the pod (model and tokenizer cache).")
    offline: bool = Field(False, description="Set HF_HUB_OFFLINE/HF_DATASETS_OFFLINE: never contact the hub.")
    trust_remote_code: bool = Field(False, description="Allow model code from the hub (verl's trust_remote_code).")


class DataSpec(DataDerived, _Model):
    """Dataset, batch size and sequence lengths (verl's `data.*`)."""

    dataset: Literal["gsm8k", "parquet"] = Field(
        "gsm8k",
        description="gsm8k: GSM8K, converted to verl's schema by the init container (from source_dir or the hub) "
        "unless present. parquet: your own files in verl's schema (columns prompt, data_source, reward_model), "
        "used as they are; the init container checks them before training (put them on the volume with "
        "`launcher data put CONFIG DIR`).",
    )
    dir: AbsPath = Field(
        "/workspace/data/gsm8k",
        description="Directory holding (or receiving) train.parquet and test.parquet in verl's schema "
        "(`launcher data put` copies into it).",
    )
    source_dir: AbsPath | None = Field(
        None,
        description="Mounted raw GSM8K (Hugging Face repo layout with README.md) to convert offline; "
        "null downloads openai/gsm8k from the hub unless model.offline is set.",
    )
    train_files: AbsPath | None = Field(None, description="Override the train parquet (default: <dir>/train.parquet).")
    val_files: AbsPath | None = Field(None, description="Override the validation parquet (default: <dir>/test.parquet).")
    train_batch_size: int = Field(8, ge=1, le=1_000_000, description="Prompts per training step.")
    max_prompt_length: int = Field(512, ge=1, le=1_048_576, description="Maximum prompt tokens.")
    max_response_length: int = Field(256, ge=1, le=1_048_576, description="Maximum generated tokens per response.")
    filter_overlong_prompts: bool = Field(True, description="Drop prompts longer than max_prompt_length.")
    truncation: Literal["error", "left", "right", "middle"] = Field(
        "error", description="What verl does with an over-long prompt that was not filtered."
    )
    val_max_samples: int | None = Field(None, ge=1, le=10_000_000, description="Limit the validation set (null: all of it).")


class AlgorithmSpec(_Model):
    """GRPO and its knobs (verl's `algorithm.*` and the actor's KL/entropy terms)."""

    adv_estimator: Literal["grpo"] = Field("grpo", description="Advantage estimator; this tool runs GRPO.")
    norm_adv_by_std_in_grpo: bool = Field(True, description="Divide GRPO advantages by the group's std.")
    use_kl_in_reward: bool = Field(False, description="Subtract a KL penalty from the reward.")
    kl_coef: float = Field(0.001, ge=0, le=100, description="KL-in-reward coefficient.")
    use_kl_loss: bool = Field(False, description="Add a KL loss against the reference policy.")
    kl_loss_coef: float = Field(0.001, ge=0, le=100, description="KL loss coefficient.")
    kl_loss_type: Literal["kl", "abs", "mse", "low_var_kl", "full"] = Field("low_var_kl", description="KL estimator.")
    entropy_coeff: float = Field(0.0, ge=0, le=100, description="Entropy bonus coefficient (0: none).")


class RolloutSpec(_Model):
    """Generation with vLLM (verl's `actor_rollout_ref.rollout.*`)."""

    name: Literal["vllm"] = Field("vllm", description="Rollout engine (vllm: on CPU-only pods, vLLM's CPU build).")
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="vLLM tensor parallel size (within one node; 1 on CPU-only pods)."
    )
    n: int = Field(2, ge=1, le=1024, description="Responses sampled per prompt (the GRPO group size).")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="Fraction of GPU memory vLLM may take.")
    temperature: float = Field(1.0, ge=0, le=10, description="Sampling temperature for training rollouts.")
    log_prob_micro_batch_size_per_gpu: int = Field(
        2, ge=1, le=65536, description="Micro-batch per GPU when recomputing log-probs (rollout and reference)."
    )


class ActorSpec(_Model):
    """The trained policy (verl's `actor_rollout_ref.actor.*` and `.model.*`)."""

    strategy: Literal["fsdp", "fsdp2"] = Field(
        "fsdp", description="Training backend (fsdp2 on CPU-only pods: FSDP1 refuses CPU parameters)."
    )
    lr: float = Field(1e-6, gt=0, le=1, description="Actor learning rate.")
    ppo_mini_batch_size: int = Field(8, ge=1, le=1_000_000, description="Prompts per PPO mini-batch.")
    ppo_micro_batch_size_per_gpu: int = Field(2, ge=1, le=65536, description="Samples per GPU per forward pass.")
    param_offload: bool = Field(False, description="Offload FSDP parameters to CPU.")
    optimizer_offload: bool = Field(False, description="Offload optimizer state to CPU.")
    gradient_checkpointing: bool = Field(True, description="Recompute activations to save memory.")
    use_remove_padding: bool = Field(
        True, description="Pack sequences without padding (needs flash-attn: false on CPU-only pods)."
    )


class TrainerSpec(TrainerDerived, _Model):
    """Loop length, checkpoints and logging (verl's `trainer.*`)."""

    project_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$", max_length=128)] = Field(
        "verl_grpo_gsm8k", description="verl project name (file-logger and checkpoint path component)."
    )
    total_training_steps: int = Field(25, ge=1, le=10_000_000, description="Training steps to run.")
    total_epochs: int = Field(1, ge=1, le=100_000, description="Epochs (total_training_steps wins when smaller).")
    save_freq: int | None = Field(
        None,
        ge=-1,
        le=10_000_000,
        description="Checkpoint every N steps; null saves once at the last step (what evaluation needs); -1 never.",
    )
    test_freq: int = Field(-1, ge=-1, le=10_000_000, description="Validate every N steps; -1 never.")
    val_before_train: bool = Field(False, description="Validate once before the first step (logged as step 0).")
    logger: list[Literal["console", "file", "wandb", "tensorboard", "mlflow"]] = Field(
        ["console", "file"], min_length=1, description="verl logger backends; console is what the launcher parses."
    )
    checkpoint_dir: AbsPath = Field(
        "/workspace/checkpoints",
        description="Checkpoint root on the run's volume; each run writes to <checkpoint_dir>/<project_name>/<job "
        "name>, the job name carrying the config hash, so two different configs never share a directory.",
    )
    resume_mode: Literal["auto", "disable", "resume_path"] = Field(
        "auto",
        description="auto: the entrypoint decides on every start: a restarted pod of this run resumes from its newest "
        "complete checkpoint (every rank's shard present), a new run starts fresh, and a rerun of a finished run "
        "exits 0 without training (`submit --new` starts over); verl itself is never given its own unchecked "
        "`auto`. disable: always train from step 0. resume_path: from resume_from_path.",
    )
    resume_from_path: AbsPath | None = Field(None, description="A global_step_N directory, with resume_mode=resume_path.")
    max_actor_ckpt_to_keep: int | None = Field(None, ge=1, le=100_000, description="Rotate old checkpoints (null: keep all).")


class ResourcesSpec(ResourcesDerived, _Model):
    """What each training pod asks Kubernetes for."""

    nodes: int = Field(1, ge=1, le=1024, description="Pods (one per node); >1 forms one Ray cluster across them.")
    gpus_per_node: int = Field(
        2,
        ge=0,
        le=16,
        description="GPUs per pod (nvidia.com/gpu limit). 0: a CPU-only pod (no GPU limit, no GPU product node "
        "selector); verl's batch rules then count one worker per pod. Workload smoke runs anywhere; workload grpo "
        f"on CPU-only pods needs an image carrying the verl CPU platform, by convention a tag ending in "
        f"{CPU_IMAGE_TAG_SUFFIX} ({CPU_IMAGE_EXAMPLE}, docker/Dockerfile.cpu), actor.strategy fsdp2, "
        "actor.use_remove_padding false and rollout.tensor_parallel_size 1: verl's real trainer with vLLM's CPU "
        "build, one trainer process per pod.",
    )
    gpu_type: str | None = Field(
        "A100-80GB",
        description=f"GPU type, translated by gpu_label_scheme into the node labels a GPU pod requires: one of "
        f"{sorted(GPU_PRODUCTS)} (not every platform offers each); null: any node with the GPU resource "
        "(no GPU product selector at all).",
    )
    gpu_label_scheme: GpuLabelScheme = Field(
        "gfd",
        description="Whose node labels name the GPU: gfd (NVIDIA GPU feature discovery, nvidia.com/gpu.product), "
        "gke (cloud.google.com/gke-accelerator), karpenter (karpenter.k8s.aws/instance-gpu-name, plus "
        "instance-gpu-memory for the A100s), aks (kubernetes.azure.com/accelerator=nvidia plus the VM size, "
        "node.kubernetes.io/instance-type, as a node affinity). The table: README, GPU selection.",
    )
    gpu_resource: LabelKey = Field("nvidia.com/gpu", description="Extended resource name of the GPU.")
    gpu_product_label: LabelKey = Field(
        "nvidia.com/gpu.product", description="Node label carrying the GPU product (gpu_label_scheme gfd only)."
    )
    cpu: Quantity = Field("16", description="CPU request and limit per pod; also Ray's CPU count.")
    memory: Quantity = Field("128Gi", description="Memory request and limit per pod (equal: Guaranteed QoS).")
    shm_size: Quantity = Field("16Gi", description="Size of the memory-backed /dev/shm (NCCL, Ray object store).")
    head_cpu: Quantity = Field("4", description="RayJob only: CPU of the Ray head pod (runs the verl driver).")
    head_memory: Quantity = Field("16Gi", description="RayJob only: memory of the Ray head pod.")


class StorageSpec(_Model):
    """One volume at `mount_path` for data, model cache and checkpoints."""

    claim_name: DnsSubdomain | None = Field(
        None, description="PersistentVolumeClaim to mount; null uses an emptyDir (lost with the pod)."
    )
    create: bool = Field(False, description="Render the PersistentVolumeClaim as part of the run.")
    size: Quantity = Field("200Gi", description="Size of the created claim.")
    storage_class: DnsSubdomain | None = Field(None, description="StorageClass of the created claim (null: default).")
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] = Field(
        "ReadWriteOnce", description="Access mode of the created claim (multi-node runs need ReadWriteMany)."
    )
    mount_path: AbsPath = Field("/workspace", description="Where the volume is mounted in every pod.")


class Toleration(_Model):
    """A pod toleration, as in the Kubernetes API (snake_case here, camelCase in the manifest)."""

    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=0, le=2_147_483_647)


class SchedulingSpec(_Model):
    """Where and how the pods are scheduled."""

    namespace: DnsLabel = Field("default", description="Namespace of the run.")
    queue: DnsLabel | None = Field(None, description="Kueue LocalQueue; the job is created suspended for Kueue to admit.")
    priority_class: DnsSubdomain | None = Field(None, description="PriorityClass of the pods.")
    node_selector: dict[LabelKey, LabelValue] = Field(
        {}, description="Node selector of every pod; on GPU pods added to the GPU labels of resources.gpu_type "
        "and gpu_label_scheme, and a key set here wins over the same key from them."
    )
    tolerations: list[Toleration] = Field([], description="Tolerations of every pod, e.g. for tainted node pools.")
    gpu_toleration: bool = Field(
        True,
        description="Add the toleration {key: <resources.gpu_resource>, operator: Exists, effect: NoSchedule} to "
        "the GPU pods: GPU node pools are usually tainted so (GKE, EKS, GPU operator guides). Unless "
        "scheduling.tolerations already has one for that key; false: only scheduling.tolerations.",
    )
    affinity: dict[Literal["nodeAffinity", "podAffinity", "podAntiAffinity"], dict[str, JsonValue]] | None = Field(
        None,
        description="Escape hatch: a Kubernetes pod affinity (camelCase, as in a pod spec) for every pod; each key "
        "given replaces the launcher's own (the GPU nodeAffinity of gpu_label_scheme aks/gke, the multi-node "
        "podAntiAffinity) on the GPU pods.",
    )
    pod_annotations: dict[LabelKey, AnnotationValue] = Field(
        {}, description="Annotations on every pod (e.g. for KWOK test stages or sidecar injection)."
    )
    service_account: DnsSubdomain | None = Field(None, description="ServiceAccount of the pods (null: default).")


class RunPolicySpec(_Model):
    """Retries, deadlines and clean-up, mapped onto the operator's own fields."""

    backoff_limit: int = Field(0, ge=0, le=100, description="Retries before the job is Failed (trainjob: restarts of the whole JobSet, failurePolicy.maxRestarts).")
    active_deadline_seconds: int | None = Field(None, ge=1, le=2_147_483_647, description="Kill the job after this long (null: never).")
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, le=2_147_483_647, description="Delete the finished job after this long (null: keep; omitted in GitOps output)."
    )
    clean_pod_policy: Literal["None", "Running", "All"] = Field(
        "None", description="PyTorchJob only: which pods to delete when the job finishes (None keeps logs readable)."
    )


class NetworkSpec(_Model):
    """NCCL settings for multi-node runs; defaults work on plain Ethernet pod networks."""

    nccl_socket_ifname: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,^=-]+$", max_length=64)] | None = Field(
        None, description="NCCL_SOCKET_IFNAME (null: let NCCL choose)."
    )
    nccl_ib: bool = Field(False, description="Use InfiniBand/RoCE (sets NCCL_IB_DISABLE=0 and adds IPC_LOCK).")
    nccl_debug: Literal["WARN", "INFO", "TRACE", "VERSION"] = Field("WARN", description="NCCL_DEBUG.")


class SecretRef(_Model):
    """A key of an existing Secret; only the reference is ever stored, never the value."""

    name: DnsSubdomain
    key: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]


class SecretsSpec(_Model):
    """Tokens the pods need, as references to existing Secrets."""

    hf_token: SecretRef | None = Field(None, description="HF_TOKEN for gated models or datasets.")
    wandb_api_key: SecretRef | None = Field(None, description="WANDB_API_KEY when the wandb logger is on.")
    ray_auth_token: SecretRef | None = Field(
        None, description="RAY_AUTH_TOKEN shared by every pod of a multi-node run (null: Ray auth off between pods)."
    )
    image_pull_secrets: list[DnsSubdomain] = Field([], description="Secrets for pulling the image.")


class ConfigMapRef(_Model):
    """A key of an existing ConfigMap."""

    name: DnsSubdomain
    key: Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]


class EnvVar(_Model):
    """One extra environment variable for every pod: exactly one of value, secret_key_ref, config_map_key_ref."""

    name: EnvName = Field(description="Variable name; may not be one the launcher sets (spec.RESERVED_ENV, LAUNCHER_*).")
    value: EnvValue | None = Field(None, description="A plain value (never a secret: use secret_key_ref).")
    secret_key_ref: SecretRef | None = Field(None, description="The value from a key of an existing Secret.")
    config_map_key_ref: ConfigMapRef | None = Field(None, description="The value from a key of an existing ConfigMap.")


class MlflowTracking(_Model):
    """verl's mlflow logger, pointed at a tracking server (never verl's default SQLite file under /tmp)."""

    enabled: bool = Field(False, description="Log every step to MLflow from the pod (adds mlflow to trainer.logger).")
    tracking_uri: TrackingUri | None = Field(
        None, description="MLFLOW_TRACKING_URI: the tracking server, http(s)://host[:port][/path] (no credentials in it)."
    )
    experiment: TrackingName | None = Field(
        None, description="MLflow experiment (null: trainer.project_name, as verl names it)."
    )
    run_name: TrackingName | None = Field(None, description="MLflow run name (null: the experiment's name).")
    username: SecretRef | None = Field(None, description="MLFLOW_TRACKING_USERNAME from a Secret (basic auth).")
    password: SecretRef | None = Field(None, description="MLFLOW_TRACKING_PASSWORD from a Secret (basic auth).")
    token: SecretRef | None = Field(None, description="MLFLOW_TRACKING_TOKEN from a Secret (bearer token).")


class TensorBoardTracking(_Model):
    """verl's tensorboard logger: event files on the run's volume (TENSORBOARD_DIR)."""

    enabled: bool = Field(False, description="Write TensorBoard event files (adds tensorboard to trainer.logger).")
    log_dir: AbsPath | None = Field(
        None, description="TENSORBOARD_DIR, under storage.mount_path (null: <checkpoint path>/tensorboard)."
    )


class WandbTracking(_Model):
    """verl's wandb logger (Weights & Biases). The W&B project is trainer.project_name and the run name the
    experiment's name: verl passes both to `wandb.init`, which wins over WANDB_PROJECT/WANDB_NAME."""

    enabled: bool = Field(False, description="Log every step to W&B (adds wandb to trainer.logger).")
    entity: TrackingName | None = Field(None, description="WANDB_ENTITY: team or user (null: the key's default).")
    base_url: TrackingUri | None = Field(None, description="WANDB_BASE_URL for a self-hosted W&B server.")
    api_key: SecretRef | None = Field(None, description="WANDB_API_KEY from a Secret (or secrets.wandb_api_key).")


class VerlSpec(_Model):
    """verl settings the typed fields do not name, passed through to verl as Hydra overrides."""

    overrides: list[HydraOverride] = Field(
        [], max_length=256,
        description="Hydra overrides appended after the launcher's own list, e.g. "
        "actor_rollout_ref.rollout.max_num_batched_tokens=2048 (also --verl KEY=VALUE, or --set "
        "verl.overrides+=KEY=VALUE). A key a typed field sets is refused naming that field; keys the launcher "
        "owns (paths, logger, resume, nnodes, n_gpus_per_node, device) are refused. `validate` composes them "
        "with verl's own config when verl is installed; the pod always does.",
    )


HealthAction = Literal["warn", "stop"]
_ACTION_DOC = "warn: a finding (printed, findings.jsonl); stop: also delete the job and exit 1 naming the rule"


class NoSignalRule(_Model):
    """Every group's rewards equal (GRPO's advantages all zero: critic/advantages/max = min = 0) for `steps` steps."""

    steps: int = Field(5, ge=1, le=100_000, description="Consecutive steps without a learning signal.")
    action: HealthAction = Field("warn", description=_ACTION_DOC)


class ClipPinnedRule(_Model):
    """Responses pinned at data.max_response_length: response_length/clip_ratio at least `ratio` for `steps` steps
    (off while null: a small or untrained model, such as the CPU demo's tiny random one, writes to the limit)."""

    ratio: float | None = Field(None, gt=0, le=1, description="Share of responses cut at max_response_length "
                                "(null: rule off).")
    steps: int = Field(5, ge=1, le=100_000, description="Consecutive steps at or above the ratio.")
    action: HealthAction = Field("warn", description=_ACTION_DOC)


class KlDriftRule(_Model):
    """The policy drifting from the rollout policy: |actor/ppo_kl| above `max` for `steps` steps (off while null)."""

    max: float | None = Field(None, gt=0, le=1_000, description="Bound on |actor/ppo_kl| (null: rule off).")
    steps: int = Field(3, ge=1, le=100_000, description="Consecutive steps above the bound.")
    action: HealthAction = Field("warn", description=_ACTION_DOC)


class EntropyDriftRule(_Model):
    """actor/entropy moving away from its start (the median of the first 3 steps) by more than `max_change` × the
    start, either way, for `steps` steps (off while null)."""

    max_change: float | None = Field(None, gt=0, le=1_000, description="Bound on |entropy / start - 1| (null: off).")
    steps: int = Field(3, ge=1, le=100_000, description="Consecutive steps beyond the bound.")
    action: HealthAction = Field("warn", description=_ACTION_DOC)


class StallRule(_Model):
    """What a stall does (no new step within the watchdog's bound while Running): each captures an incident first."""

    action: Literal["report", "delete", "restart"] = Field(
        "report", description="report: the incident only; delete: delete the job (its PVC kept), exit 1; restart: "
        "delete the stuck attempt's pods so the operator starts them again and the run resumes from its newest "
        "checkpoint, at most max_restarts times, then delete the job and exit 1 (`--on-stall` overrides).")
    max_restarts: int = Field(2, ge=0, le=100, description="restart: attempts ended per run before giving up.")


class HealthSpec(_Model):
    """RL health rules the follower's watchdog checks on every step (besides its stall and collapse checks)."""

    stall: StallRule = StallRule()
    no_signal: NoSignalRule = NoSignalRule()
    clip_pinned: ClipPinnedRule = ClipPinnedRule()
    kl_drift: KlDriftRule = KlDriftRule()
    entropy_drift: EntropyDriftRule = EntropyDriftRule()


class TrackingSpec(_Model):
    """Experiment trackers the pods log to (MLflow, TensorBoard, W&B); `launcher export` writes the same from runs/."""

    mlflow: MlflowTracking = MlflowTracking()
    tensorboard: TensorBoardTracking = TensorBoardTracking()
    wandb: WandbTracking = WandbTracking()


# `pkg://<dotted.module>`: a module importable in the image (verl 0.9.1's load_module reads the pkg:// form).
# Or a local Python file (./my_reward.py): the loader reads it into `source`, which the run's ConfigMap carries.
REWARD_PATH_RE = (rf"^(pkg://[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                  rf"|[^{CONTROL_CHARS}]*[^/{CONTROL_CHARS}]\.py)$")
# A reward file travels twice in the run's ConfigMap (spec.yaml and the mounted file), which must stay under 1 MiB.
MAX_REWARD_SOURCE_BYTES = 256 * 1024


class RewardFunction(_Model):
    """A reward function verl calls instead of its built-in scorer (verl's `reward.custom_reward_function`)."""

    path: Annotated[str, StringConstraints(pattern=REWARD_PATH_RE, max_length=512)] = Field(
        description="Where the function lives: pkg://<dotted.module>, a module inside the image (e.g. "
        "pkg://grpo_verl_cpu.reward in the CPU image), or a local Python file (./my_reward.py, relative to the "
        "config file that names it; from --set, to the working directory), which the launcher reads into "
        "`source` and ships in the run's ConfigMap, mounted read-only in the pods.",
    )
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)] = Field(
        "compute_score",
        description="The function in that module: called as name(data_source, solution_str, ground_truth, "
        "extra_info), returning a score or a dict with `score`.",
    )
    source: Annotated[str, StringConstraints(max_length=MAX_REWARD_SOURCE_BYTES)] | None = Field(
        None,
        description="The local file's content (at most 256 KiB), read by the launcher from `path`; with Helm: "
        "--set-file reward.function.source=./my_reward.py. The config hash covers it, so a changed reward "
        "function is a new run. `validate` checks that it is Python defining `name`, importing nothing from it.",
    )

    @property
    def local(self) -> bool:
        """A local file shipped in the ConfigMap, rather than a module in the image."""
        return not self.path.startswith("pkg://")


class RewardSpec(_Model):
    """How responses are scored (verl's `reward.*`)."""

    function: RewardFunction | None = Field(
        None,
        description="A custom reward function; null: verl's rule for the dataset (GSM8K: 1 for a right "
        "'#### <answer>', else 0). The CPU image carries pkg://grpo_verl_cpu.reward compute_score: verl's "
        "GSM8K score, else 0.5 × the share of digits in the response (a shaping term that gives a random "
        "model a learning signal).",
    )


class SecuritySpec(_Model):
    """Pod security. Defaults are as strict as a GPU training pod allows; each exception is a field."""

    run_as_user: int = Field(1000, ge=1, le=2_147_483_647, description="UID of the image's non-root user.")
    run_as_group: int = Field(1000, ge=1, le=2_147_483_647, description="GID of the image's non-root user.")
    read_only_root_filesystem: bool = Field(
        True, description="Root filesystem read-only; /tmp, $HOME, /dev/shm and the storage volume stay writable."
    )
    extra_capabilities: list[Literal["IPC_LOCK", "SYS_PTRACE", "SYS_NICE"]] = Field(
        [],
        description="Capabilities added back after dropping ALL. IPC_LOCK: pinned memory for RDMA (added "
        "automatically with network.nccl_ib); SYS_PTRACE: py-spy/CUDA IPC debugging.",
    )


class SmokeSpec(_Model):
    """The smoke workload (workload: smoke): the pods' wiring exercised without verl's trainer or a GPU."""

    steps: int = Field(3, ge=1, le=1_000_000, description="Steps to run; each sleeps, all-reduces and logs one metric line.")
    step_seconds: float = Field(1.0, ge=0, le=86_400, description="Sleep per step, in seconds (how long the run lasts).")
    log_lines_per_step: int = Field(
        0, ge=0, le=1_000_000, description="Extra padding log lines per step (to exercise kubelet log rotation)."
    )
    memory_mb: int = Field(
        0,
        ge=0,
        le=16_777_216,
        description="MiB the all-reduce process of every pod allocates and touches before step 1 (0: none); a "
        "memory limit below it gets the container OOM-killed.",
    )
    min_shm: Quantity = Field(
        "64Mi", description="Smallest /dev/shm the workload accepts (the size statvfs reports inside the pod)."
    )
    connect_timeout_s: int = Field(
        60,
        ge=1,
        le=86_400,
        description="Seconds to wait for the pods' torch.distributed rendezvous and for every Ray node to be alive.",
    )


class ExperimentSpec(ExperimentDerived, _Model):
    """A verl GRPO experiment and the Kubernetes job that runs it."""

    name: DnsLabel = Field(description="Experiment name; the job is <name>-<config hash>.")
    backend: Literal["pytorchjob", "rayjob", "trainjob"] = Field(
        "pytorchjob",
        description="Kubeflow PyTorchJob (training-operator v1), KubeRay RayJob, or Kubeflow Trainer v2 TrainJob "
        "(with its own TrainingRuntime).",
    )
    workload: Literal["grpo", "smoke"] = Field(
        "grpo",
        description="grpo: verl's GRPO trainer. smoke: the smoke workload (section smoke) in exactly the same pods: "
        "in-container checks, verl config validation, Ray, a torch.distributed all-reduce across pods, metric lines.",
    )
    image: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$", max_length=512)] = Field(
        "ghcr.io/grpo-launcher/verl-grpo:0.1.0",
        description=f"Training image (docker/Dockerfile). A tag ending in {CPU_IMAGE_TAG_SUFFIX} names an image "
        f"carrying the verl CPU platform and the builtin: models ({CPU_IMAGE_EXAMPLE}, docker/Dockerfile.cpu).",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="Pull policy.")
    model: ModelSpec = ModelSpec()
    data: DataSpec = DataSpec()
    algorithm: AlgorithmSpec = AlgorithmSpec()
    rollout: RolloutSpec = RolloutSpec()
    actor: ActorSpec = ActorSpec()
    trainer: TrainerSpec = TrainerSpec()
    reward: RewardSpec = RewardSpec()
    resources: ResourcesSpec = ResourcesSpec()
    storage: StorageSpec = StorageSpec()
    scheduling: SchedulingSpec = SchedulingSpec()
    run_policy: RunPolicySpec = RunPolicySpec()
    network: NetworkSpec = NetworkSpec()
    secrets: SecretsSpec = SecretsSpec()
    security: SecuritySpec = SecuritySpec()
    smoke: SmokeSpec = SmokeSpec()
    tracking: TrackingSpec = TrackingSpec()
    verl: VerlSpec = VerlSpec()
    health: HealthSpec = HealthSpec()
    env: list[EnvVar] = Field(
        [], max_length=256,
        description="Extra environment variables for every pod (plain values or Secret/ConfigMap references); "
        "names the launcher sets are refused.",
    )


def field_docs(model: type[BaseModel] = ExperimentSpec, prefix: str = "") -> dict[str, str]:
    """Dotted field path → description, for docs and the chart's `# --` comments."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = info.annotation
        inner = [a for a in get_args(ann) if a is not type(None)]
        if len(inner) == 1 and len(get_args(ann)) == 2 and isinstance(inner[0], type):
            ann = inner[0]  # an optional section (reward.function): its own keys are documented too
        if isinstance(ann, type) and issubclass(ann, BaseModel) and ann not in (Toleration, SecretRef, ConfigMapRef, EnvVar):
            out[path] = info.description or (ann.__doc__ or "").strip().splitlines()[0]
            out.update(field_docs(ann, path + "."))
        else:
            out[path] = info.description or ""
    return out

