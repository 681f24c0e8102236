"""Spec → Kubernetes objects, through Jinja templates, as a pure function.

`render(spec)` takes a validated spec and returns plain dicts in apply order: no I/O, no clock, no
randomness, so the same config always gives byte-identical YAML. The Jinja templates (`templates/`)
hold the shape of each object; this module computes the derived structures (labels, security
contexts, volumes, environment) so templates stay small and declarative. Every template
scalar is emitted through `q` and every structure through `json`, both YAML-safe encoders, and the
text is parsed back into objects before anyone sees it.
"""

from __future__ import annotations

import math
import shlex
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import jinja2
import yaml

from launcher.spec import names as L
from launcher.spec import canonical
from launcher.spec.contract import REWARD_FILE_KEY, SPEC_MOUNT, SPEC_PATH, START_OVER_ENV
from launcher.spec import gpu as gpu_select
from launcher.spec.verl import CPU_RAY_MIN_CPUS
from launcher.render.env import HOME_DIR, pod_env

if TYPE_CHECKING:
    from launcher.spec.model import ExperimentSpec

# Ray version baked into docker/requirements.lock; KubeRay uses it to pick ray start flags.
RAY_VERSION = "2.60.0"
ENTRYPOINT = ["python3", "-m", "launcher.entrypoint", "--config", SPEC_PATH]
# A pod's `command` replaces the image's ENTRYPOINT, tini included: keep tini as PID 1 so Ray's
# orphaned processes are reaped (the entrypoint forwards signals to verl itself).
POD_COMMAND = ["/usr/bin/tini", "--", *ENTRYPOINT]

Component = Literal["trainer", "eval", "data"]


# --------------------------------------------------------------------------------------------------
# YAML-safe encoders used by the templates


def yaml_quote(text: str) -> str:
    """A YAML double-quoted scalar for any string: printable ASCII kept, everything else escaped."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def q(value: Any) -> str:
    """Encode one scalar (str, int, float, bool, None) as a YAML flow scalar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite number {value!r} cannot be rendered")
        return repr(value)
    if isinstance(value, str):
        return yaml_quote(value)
    raise TypeError(f"q: expected a scalar, got {type(value).__name__}")


def to_flow(value: Any) -> str:
    """Encode a structure (dicts, lists, scalars) as YAML flow style."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_quote(str(k))}: {to_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_flow(v) for v in value) + "]"
    return q(value)


# PyYAML's libyaml bindings when it was built with them (the wheels are), its pure-Python classes otherwise: the
# same constructor, representer and resolver either way, so the objects and the text do not depend on which.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's own cache of compiled templates (keyed by each template's source), so that a fresh `launcher render`
    does not compile them again (half of its own time); None where no cache directory can be written. What is
    rendered never depends on it."""
    import os

    path = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "grpo-launcher", "jinja")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(path) if os.access(path, os.W_OK) else None


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("launcher.render", "templates"),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    # every scalar through `q`, every structure through `json`
    env.filters["q"] = q
    env.filters["json"] = to_flow
    return env


def _render_template(template: str, **context: Any) -> dict:
    text = _env().get_template(template).render(**context)
    # libyaml's parser (PyYAML's C binding) with the safe constructor: the same objects as yaml.safe_load at a
    # fraction of the cost, which is most of a fresh process's render after imports.
    obj = yaml.load(text, Loader=_Loader)
    if not isinstance(obj, dict):
        raise RuntimeError(f"template {template} rendered {type(obj).__name__}, expected a mapping")
    return obj


# --------------------------------------------------------------------------------------------------
# Derived structures


class PodParts(NamedTuple):
    """Everything the `_pod.j2` macro needs for one kind of pod."""

    labels: dict
    annotations: dict
    restart_policy: str
    service_account: str | None
    priority_class: str | None
    node_selector: dict
    tolerations: list
    affinity: dict | None
    image_pull_secrets: list
    pod_security: dict
    container_security: dict
    image: str
    image_pull_policy: str
    command: list | None
    init_command: list
    init_resources: dict
    env: list
    resources: dict
    volume_mounts: list
    volumes: list


def _security(spec: ExperimentSpec) -> tuple[dict, dict]:
    sec = spec.security
    pod = {
        "runAsNonRoot": True,
        "runAsUser": sec.run_as_user,
        "runAsGroup": sec.run_as_group,
        "fsGroup": sec.run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    caps = list(sec.extra_capabilities)
    if spec.network.nccl_ib and "IPC_LOCK" not in caps:
        caps.append("IPC_LOCK")  # RDMA registers (pins) memory
    capabilities: dict = {"drop": ["ALL"]}
    if caps:
        capabilities["add"] = sorted(caps)
    container = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": sec.read_only_root_filesystem,
        "runAsNonRoot": True,
        "capabilities": capabilities,
    }
    return pod, container


def _volumes(spec: ExperimentSpec, configmap: str) -> tuple[list, list]:
    st = spec.storage
    workspace = (
        {"name": "workspace", "persistentVolumeClaim": {"claimName": st.claim_name}}
        if st.claim_name
        else {"name": "workspace", "emptyDir": {}}
    )
    volumes = [
        {"name": "spec", "configMap": {"name": configmap}},
        # /dev/shm defaults to 64 MiB in a pod, which breaks NCCL and the Ray object store.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm_size}},
        workspace,
        # Writable scratch under a read-only root filesystem (Ray sessions, Triton/vLLM caches).
        {"name": "tmp", "emptyDir": {}},
        {"name": "home", "emptyDir": {}},
    ]
    mounts = [
        {"name": "spec", "mountPath": SPEC_MOUNT, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "workspace", "mountPath": st.mount_path},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "home", "mountPath": HOME_DIR},
    ]
    return volumes, mounts


def _tolerations(spec: ExperimentSpec, *, gpu: bool = False) -> list[dict]:
    """scheduling.tolerations; on GPU pods (gpu) also the GPU taint's, unless one for that key is given."""
    out = []
    for t in spec.scheduling.tolerations:
        item = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect,
                "tolerationSeconds": t.toleration_seconds}
        out.append({k: v for k, v in item.items() if v is not None})
    key = spec.resources.gpu_resource
    if gpu and spec.scheduling.gpu_toleration and not any(t.get("key") == key for t in out):
        # GPU node pools are usually tainted `nvidia.com/gpu:NoSchedule` (GKE adds it to GPU pools of
        # mixed clusters, EKS and GPU-operator guides recommend it); without this the pods stay Pending.
        out.append({"key": key, "operator": "Exists", "effect": "NoSchedule"})
    return out


def gpu_requirements(spec: ExperimentSpec) -> tuple:
    """The node labels a GPU pod requires for resources.gpu_type on resources.gpu_label_scheme (none: any GPU)."""
    res = spec.resources
    if res.cpu_only:
        return ()
    return gpu_select.requirements(res.gpu_label_scheme, res.gpu_type, res.gpu_product_label)


def gpu_pod_requirements(spec: ExperimentSpec) -> tuple:
    """Every node label the GPU pods require as rendered: scheduling.node_selector, then the GPU preset's
    labels it does not override (the pre-flight's and status's view of the pods' nodeSelector and the
    launcher's nodeAffinity). A scheduling.affinity nodeAffinity replaces the preset's `In` expressions;
    it is the user's own and not evaluated here."""
    user = spec.scheduling.node_selector
    replaced = "nodeAffinity" in (spec.scheduling.affinity or {})
    own = [r for r in gpu_requirements(spec) if r.key not in user and not (replaced and len(r.values) > 1)]
    return tuple(gpu_select.Requirement(k, (v,)) for k, v in user.items()) + tuple(own)


def gpu_pod_tolerations(spec: ExperimentSpec) -> list[dict]:
    """The GPU pods' tolerations as rendered (with the GPU taint's toleration unless turned off)."""
    return _tolerations(spec, gpu=not spec.resources.cpu_only)


def _gpu_node_affinity(expressions: list[dict]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}


def _affinity(spec: ExperimentSpec, own: dict) -> dict | None:
    """The launcher's affinity with scheduling.affinity laid over it: each key given replaces ours."""
    merged = {**own, **(spec.scheduling.affinity or {})}
    return dict(sorted(merged.items())) or None


def _anti_affinity(instance: str) -> dict:
    """One GPU pod per node, so a multi-node run really spans nodes."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {L.INSTANCE_LABEL: instance, L.ROLE_LABEL: "gpu"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


# Data preparation (GSM8K → parquet with pyarrow) fits in this on any GPU pod.
INIT_RESOURCES = {"cpu": "1", "memory": "2Gi"}


def _init_resources(spec: ExperimentSpec, container: dict) -> dict:
    """The init container's size: fixed on GPU pods; a CPU-only pod's own size.

    A pod's effective request is the larger of its init and main containers: on a small CPU node
    (workload smoke, gpus_per_node 0) a fixed 1 CPU would make a 500m pod ask for 1 CPU, and a
    RayJob's head + worker + submitter would no longer fit a 2-core node.
    """
    size = dict(container) if spec.resources.cpu_only else dict(INIT_RESOURCES)
    return {"requests": size, "limits": dict(size)}


def _pod_parts(
    spec: ExperimentSpec,
    *,
    instance: str,
    configmap: str,
    gpu: bool,
    command: list | None,
    restart_policy: str,
    component: Component,
    extra_env: tuple[dict, ...] = (),
) -> PodParts:
    res = spec.resources
    pod_sec, ctr_sec = _security(spec)
    volumes, mounts = _volumes(spec, configmap)
    if gpu:
        # The trainer/worker pods (role "gpu" even when CPU-only: the label selects the pods that
        # spread one per node). A CPU-only pod (gpus_per_node 0, workload smoke) asks for no GPU and
        # is not pinned to a GPU product, so it schedules on plain nodes.
        resources = {"cpu": res.cpu, "memory": res.memory}
        node_selector, expressions = gpu_select.split(gpu_requirements(spec))
        # the user's node_selector wins over the GPU preset for the same key
        node_selector.update(spec.scheduling.node_selector)
        if not res.cpu_only:
            resources[res.gpu_resource] = res.gpus_per_node
        tolerations = _tolerations(spec, gpu=not res.cpu_only)
        own = _gpu_node_affinity(expressions) if expressions else {}
        if res.nodes > 1:
            own.update(_anti_affinity(instance))
        affinity = _affinity(spec, own)
    else:
        resources = {"cpu": res.head_cpu, "memory": res.head_memory}
        node_selector = dict(spec.scheduling.node_selector)
        tolerations = _tolerations(spec)
        affinity = _affinity(spec, {})
    return PodParts(
        labels=L.pod_labels(spec, "gpu" if gpu else "head", component, instance),
        annotations=dict(sorted(spec.scheduling.pod_annotations.items())),
        restart_policy=restart_policy,
        service_account=spec.scheduling.service_account,
        priority_class=spec.scheduling.priority_class,
        node_selector=dict(sorted(node_selector.items())),
        tolerations=tolerations,
        affinity=affinity,
        image_pull_secrets=[{"name": n} for n in spec.secrets.image_pull_secrets],
        pod_security=pod_sec,
        container_security=ctr_sec,
        image=spec.image,
        image_pull_policy=spec.image_pull_policy,
        command=command,
        # Every pod prepares (or finds) the dataset on its own volume before verl starts, so
        # emptyDir and shared claims behave the same and workers never wait on the head.
        init_command=[*ENTRYPOINT, "--prepare-data-only"],
        init_resources=_init_resources(spec, resources),
        env=[*pod_env(spec), *extra_env],
        resources=resources,
        volume_mounts=mounts,
        volumes=volumes,
    )


# `launcher data put`'s pod: small, and gone within the hour even if nobody deletes it.
DATA_POD_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
DATA_POD_DEADLINE_S = 3600


def render_data_pod(spec: ExperimentSpec) -> dict:
    """The pod `launcher data put` copies files through: the run's volume (storage.claim_name) at
    storage.mount_path and a writable /tmp, the run's security context and placement (never a GPU), no Kueue queue
    label (a copy must not wait behind training jobs for quota it barely uses)."""
    name = L.data_pod_name(spec)
    parts = _pod_parts(spec, instance=name, configmap="", gpu=False, command=None, restart_policy="Never",
                       component="data")
    volumes = [v for v in parts.volumes if v["name"] in ("workspace", "tmp")]
    mounts = [m for m in parts.volume_mounts if m["name"] in ("workspace", "tmp")]
    labels = {k: v for k, v in L.pod_labels(spec, "data", "data", name).items() if k != L.KUEUE_QUEUE_LABEL}
    return _render_template(
        "datapod.yaml.j2", name=name, namespace=spec.scheduling.namespace, labels=labels, pod=parts,
        deadline=DATA_POD_DEADLINE_S, command=["python3", "-c", f"import time; time.sleep({DATA_POD_DEADLINE_S})"],
        resources=DATA_POD_RESOURCES, mounts=mounts, volumes=volumes)


def _worker_start_params(spec: ExperimentSpec) -> dict[str, str]:
    """KubeRay's `ray start` parameters of the RayJob's worker pods: its own (GPUs from the container's limit) for
    GPU pods; for CPU training one logical GPU (verl's resource pools ask Ray for "GPU") and CPU_RAY_MIN_CPUS
    logical CPUs (TransferQueue's actors), as verl's own `ray.init` and the multi-node `ray start` declare."""
    if not spec.cpu_training:
        return {}
    return {"num-cpus": str(CPU_RAY_MIN_CPUS), "num-gpus": str(spec.ray_gpus_per_node)}


def _submitter_parts(spec: ExperimentSpec, head: PodParts) -> PodParts:
    """KubeRay's `ray job submit` pod, from the head's parts: small, no data, no GPU."""
    keep = {"tmp", "home"}
    size = {"cpu": "500m", "memory": "1Gi"}
    return head._replace(
        labels={**head.labels, L.ROLE_LABEL: "submitter"},
        resources=size,
        node_selector=dict(sorted(spec.scheduling.node_selector.items())),
        tolerations=_tolerations(spec),
        env=[e for e in head.env if e["name"] in ("PYTHONUNBUFFERED", "HOME", "POD_NAME", "POD_NAMESPACE",
                                                  "RAY_COLOR_PREFIX", "RAY_AUTH_TOKEN")],
        volumes=[v for v in head.volumes if v["name"] in keep],
        volume_mounts=[m for m in head.volume_mounts if m["name"] in keep],
    )


# --------------------------------------------------------------------------------------------------
# Objects


def configmap_name(instance: str) -> str:
    return f"{instance}-spec"


def spec_document(spec: ExperimentSpec) -> str:
    """The ConfigMap's `spec.yaml`: the resolved spec as indented canonical JSON (JSON is YAML).

    JSON in Go's layout rather than PyYAML's, because the Helm chart must put byte-identical text
    there and Helm can only write it with `toPrettyJson`; readers parse it as YAML unchanged
    (`canonical.yaml_document` escapes what YAML would refuse).
    """
    return canonical.yaml_document(spec.canonical_data())


def pytorchjob_restart_policy(spec: ExperimentSpec) -> str:
    """The PyTorchJob replicas' restart policy: `OnFailure` when run_policy.backoff_limit allows retries, else `Never`.

    training-operator v1.9 counts only container restarts of OnFailure/Always/ExitCode replicas against
    backoffLimit (`core.PastBackoffLimit`); with `Never` a failed pod fails the job whatever the limit. ExitCode
    recreates the pod instead, with a restart count of 0, so a container that is OOM-killed every time would be
    retried forever. OnFailure restarts the container in place (the kubelet's back-off between tries) and
    stops at the limit. A restarted trainer resumes from its newest complete checkpoint (trainer.resume_mode auto).
    """
    return "OnFailure" if spec.run_policy.backoff_limit > 0 else "Never"


def render(spec: ExperimentSpec, *, component: Component = "trainer", gitops: bool = False,
           entry_args: tuple[str, ...] = (), instance: str | None = None,
           start_over: str | None = None) -> list[dict]:
    """Render the objects of one run, in apply order: PVC, ConfigMap, then the job.

    Backend trainjob renders two objects for the job: its own TrainingRuntime (the pod shape, the
    JobSet's failure policy and TTL), then the TrainJob of the same name that references it.

    gitops=True drops TTL self-deletion, which a GitOps controller would fight by recreating
    (and so re-running) a job that deleted itself. `instance` overrides the job name (the
    evaluation job's name also hashes which models it evaluates: `labels.eval_job_name`).
    `start_over` (`submit --new`'s token) sets `LAUNCHER_START_OVER` in every pod: the run's
    entrypoint then sets the checkpoint directory's earlier contents aside once (`entrypoint.resume`).
    """
    extra_env = ({"name": START_OVER_ENV, "value": start_over},) if start_over else ()
    instance = instance or L.job_name(spec, component)
    labels = L.common_labels(spec, component, instance)
    namespace = spec.scheduling.namespace
    cm = configmap_name(instance)
    ttl = None if gitops else spec.run_policy.ttl_seconds_after_finished
    command = [*POD_COMMAND, *entry_args]
    objects: list[dict] = []

    st = spec.storage
    if st.create and st.claim_name:
        objects.append(
            _render_template(
                "pvc.yaml.j2", name=st.claim_name, namespace=namespace, labels=labels,
                access_mode=st.access_mode, storage_class=st.storage_class, size=st.size,
            )
        )
    fn = spec.reward.function  # a local reward file travels in the ConfigMap beside the spec
    objects.append(
        _render_template("configmap.yaml.j2", name=cm, namespace=namespace, labels=labels, spec_yaml=spec_document(spec),
                         reward_key=REWARD_FILE_KEY, reward=fn.source if fn else None)
    )
    common = dict(
        job_name=instance, namespace=namespace, labels=labels, run_policy=spec.run_policy,
        ttl_seconds_after_finished=ttl, suspend=spec.scheduling.queue is not None,
        workers=0,
    )
    if spec.backend == "pytorchjob":
        restart = pytorchjob_restart_policy(spec)
        gpu_pod = _pod_parts(spec, instance=instance, configmap=cm, gpu=True, command=command,
                             restart_policy=restart, component=component, extra_env=extra_env)
        job = _render_template(
            "pytorchjob.yaml.j2", **{**common, "workers": spec.resources.nodes - 1},
            gpu_pod=gpu_pod,
            replica_restart_policy=restart,
            # Gang admission: Kueue admits a suspended job as a whole; without Kueue the PodGroup's
            # minAvailable keeps a gang scheduler from starting part of a multi-node run.
            min_available=spec.resources.nodes if spec.resources.nodes > 1 and not spec.scheduling.queue else None,
        )
    elif spec.backend == "trainjob":
        gpu_pod = _pod_parts(spec, instance=instance, configmap=cm, gpu=True, command=command,
                             restart_policy="Never", component=component, extra_env=extra_env)
        # The runtime carries the run's labels without Kueue's: Kueue admits the TrainJob, and a
        # queue label on a TrainingRuntime means nothing to it.
        runtime_labels = {k: v for k, v in labels.items() if not k.startswith("kueue.x-k8s.io/")}
        objects.append(_render_template(
            "trainingruntime.yaml.j2", **common, runtime_labels=runtime_labels, nodes=spec.resources.nodes,
            gpu_pod=gpu_pod,
        ))
        job = _render_template("trainjob.yaml.j2", **common, nodes=spec.resources.nodes)
    else:
        gpu_pod = _pod_parts(spec, instance=instance, configmap=cm, gpu=True, command=None,
                             restart_policy="Never", component=component, extra_env=extra_env)
        head_pod = _pod_parts(spec, instance=instance, configmap=cm, gpu=False, command=None,
                              restart_policy="Never", component=component, extra_env=extra_env)
        job = _render_template(
            "rayjob.yaml.j2", **{**common, "workers": spec.resources.nodes},
            entrypoint=shlex.join([*ENTRYPOINT, *entry_args]),
            ray_version=RAY_VERSION,
            # The head runs only the driver: no GPU work may be placed on it.
            head_start_params={"dashboard-host": "0.0.0.0", "num-gpus": "0"},
            worker_start_params=_worker_start_params(spec),
            head_pod=head_pod,
            gpu_pod=gpu_pod,
            submitter_pod=_submitter_parts(spec, head_pod),
        )
    objects.append(job)
    return objects


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """SafeDumper that writes multi-line strings (the ConfigMap's spec.yaml) as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data and _block_safe(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _block_safe(text: str) -> bool:
    # Literal blocks cannot carry trailing spaces on a line or non-printable characters faithfully.
    return all(line == line.rstrip(" ") and line.isprintable() for line in text.split("\n"))


_Dumper.add_representer(str, _str_representer)


def to_yaml(objects: list[dict]) -> str:
    """Multi-document YAML of `objects`, deterministic (insertion order, no timestamps)."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True, allow_unicode=False, width=120)


def object_filename(obj: dict, index: int) -> str:
    """`NN-kind-name.yaml`: one file per object, numbered in apply order."""
    return f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
