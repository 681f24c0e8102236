"""Strict schema validation of rendered objects against the real upstream schemas.

CRDs come from the operators' Go modules at test time (`go mod download -json MODULE@VERSION`),
never from a committed copy; core objects are checked against Kubernetes' own OpenAPI v3 document
from the `k8s.io/kubernetes` module. Versions are read from hack/cluster/versions.sh so the tests,
the local control plane and the docs agree on one set.

Validation is strict like `kubectl --validate=strict`: every object schema that lists properties
and does not preserve unknown fields gets `additionalProperties: false`.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
VERSIONS_SH = ROOT / "hack" / "cluster" / "versions.sh"


def component_version(name: str) -> str:
    """Default of `NAME=${NAME:-value}` in hack/cluster/versions.sh."""
    text = VERSIONS_SH.read_text()
    m = re.search(rf"^{name}=\$\{{{name}:-([^}}]+)\}}", text, re.M)
    if not m:
        raise AssertionError(f"{name} not found in {VERSIONS_SH}")
    return m.group(1)


def _go_env() -> dict:
    cache = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher"))
    env = dict(os.environ)
    env.setdefault("GOMODCACHE", str(cache / "gomod"))
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOFLAGS", "-mod=mod")
    return env


@functools.lru_cache(maxsize=None)
def module_dir(module: str, version: str) -> Path:
    """Download (or find in the module cache) a Go module and return its source directory."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True, text=True, env=_go_env(), timeout=1800, cwd="/",
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module}@{version} failed: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])


def _strict(schema: dict) -> dict:
    """Copy of an OpenAPI v3 structural schema turned into a strict JSON schema."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("x-kubernetes-int-or-string"):
                node.pop("type", None)
                node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            if node.pop("nullable", False) and "type" in node:
                node["type"] = [node["type"], "null"]
            if (
                node.get("type") == "object"
                and "properties" in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
                and "additionalProperties" not in node
            ):
                node["additionalProperties"] = False
            for key, value in node.items():
                if (
                    # an object with no fields at all (Trainer v2.2's `mlPolicy.torch: {}`): the API server prunes
                    # whatever is put there, kubectl --validate=strict refuses it. Not `metadata`: controller-gen
                    # writes an embedded ObjectMeta as a bare object the API server fills in itself.
                    key not in ("metadata",)
                    and isinstance(value, dict)
                    and value.get("type") == "object"
                    and not {"properties", "additionalProperties", "x-kubernetes-preserve-unknown-fields",
                             "x-kubernetes-embedded-resource", "$ref", "allOf", "anyOf", "oneOf"} & value.keys()
                ):
                    value["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(s)
    return s


def _crd_validator(path: Path, version: str) -> jsonschema.Validator:
    crd = yaml.safe_load(path.read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = _strict(v["schema"]["openAPIV3Schema"])
            return jsonschema.Draft7Validator(schema)
    raise AssertionError(f"{path}: no version {version}")


@functools.lru_cache(maxsize=None)
def validators() -> dict[tuple[str, str], jsonschema.Validator]:
    """(apiVersion, kind) → strict validator, for every kind the launcher renders."""
    to = module_dir("github.com/kubeflow/training-operator", component_version("TRAINING_OPERATOR_VERSION"))
    kr = module_dir("github.com/ray-project/kuberay/ray-operator", component_version("KUBERAY_VERSION"))
    k8s = module_dir("k8s.io/kubernetes", component_version("K8S_VERSION"))
    tr = module_dir("github.com/kubeflow/trainer/v2", component_version("TRAINER_VERSION"))
    js = module_dir("sigs.k8s.io/jobset", component_version("JOBSET_VERSION"))
    out = {
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"):
            _crd_validator(tr / "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml", "v1alpha1"),
        ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"):
            _crd_validator(tr / "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml", "v1alpha1"),
        # What the Trainer controller makes of a TrainJob (tests validate the JobSet they derive).
        ("jobset.x-k8s.io/v1alpha2", "JobSet"):
            _crd_validator(js / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
        ("kubeflow.org/v1", "PyTorchJob"): _crd_validator(to / "manifests/base/crds/kubeflow.org_pytorchjobs.yaml", "v1"),
        ("ray.io/v1", "RayJob"): _crd_validator(kr / "config/crd/bases/ray.io_rayjobs.yaml", "v1"),
        ("ray.io/v1", "RayCluster"): _crd_validator(kr / "config/crd/bases/ray.io_rayclusters.yaml", "v1"),
    }
    core = json.loads((k8s / "api/openapi-spec/v3/api__v1_openapi.json").read_text())
    strict_core = _strict(core)
    for kind in ("ConfigMap", "PersistentVolumeClaim", "ServiceAccount", "Secret", "Service"):
        schema = {"$ref": f"#/components/schemas/io.k8s.api.core.v1.{kind}", "components": strict_core["components"]}
        out[("v1", kind)] = jsonschema.Draft7Validator(schema)
    apps = json.loads((k8s / "api/openapi-spec/v3/apis__apps__v1_openapi.json").read_text())
    strict_apps = _strict(apps)
    schema = {"$ref": "#/components/schemas/io.k8s.api.apps.v1.Deployment", "components": strict_apps["components"]}
    out[("apps/v1", "Deployment")] = jsonschema.Draft7Validator(schema)  # the chart's optional TensorBoard
    rbac = json.loads((k8s / "api/openapi-spec/v3/apis__rbac.authorization.k8s.io__v1_openapi.json").read_text())
    strict_rbac = _strict(rbac)
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        schema = {"$ref": f"#/components/schemas/io.k8s.api.rbac.v1.{kind}", "components": strict_rbac["components"]}
        out[("rbac.authorization.k8s.io/v1", kind)] = jsonschema.Draft7Validator(schema)
    return out


def schema_errors(obj: dict) -> list[str]:
    """Every schema violation of one object, as `path: message` lines (empty when valid)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    validator = validators().get(key)
    if validator is None:
        return [f"no schema known for {key}"]
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


# Kueue's CRDs, read from its Go module as the operators' are. The local cluster (hack/cluster) does
# not pin Kueue; the launcher renders no Kueue object itself (only the queue-name label and
# `suspend`), so these validate the LocalQueue/ClusterQueue/ResourceFlavor objects the tests create.
KUEUE_MODULE, KUEUE_VERSION = "sigs.k8s.io/kueue", "v0.17.0"
KUEUE_CRD_DIR = "config/components/crd/bases"


def kueue_crd_paths() -> list[Path]:
    """Every Kueue v0.17.0 CRD file (config/components/crd/bases)."""
    return sorted((module_dir(KUEUE_MODULE, KUEUE_VERSION) / KUEUE_CRD_DIR).glob("kueue.x-k8s.io_*.yaml"))


def kueue_schema_errors(obj: dict) -> list[str]:
    """Violations of one Kueue object against its v0.17.0 CRD at the object's apiVersion."""
    group, version = obj["apiVersion"].split("/")
    plural = {"LocalQueue": "localqueues", "ClusterQueue": "clusterqueues", "ResourceFlavor": "resourceflavors",
              "Workload": "workloads", "WorkloadPriorityClass": "workloadpriorityclasses"}[obj["kind"]]
    path = module_dir(KUEUE_MODULE, KUEUE_VERSION) / KUEUE_CRD_DIR / f"{group}_{plural}.yaml"
    v = _crd_validator(path, version)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(obj)]


# GitOps controllers' CRDs, from their Go modules as the operators' are, for the examples in manifests/gitops/:
# Flux at the versions the local cluster runs (GRPO_FLUX=1); Argo CD for its schema only (no Argo CD runs here).
GITOPS_CRDS = {
    ("source.toolkit.fluxcd.io/v1", "GitRepository"):
        ("github.com/fluxcd/source-controller", "FLUX_SOURCE_VERSION", "config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml"),
    ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"):
        ("github.com/fluxcd/kustomize-controller", "FLUX_KUSTOMIZE_VERSION",
         "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"),
    ("argoproj.io/v1alpha1", "Application"):
        ("github.com/argoproj/argo-cd/v3", "ARGOCD_VERSION", "manifests/crds/application-crd.yaml"),
}


def gitops_crd_path(api_version: str, kind: str) -> Path:
    """The CRD file of a GitOps kind, in its module at the version hack/cluster/versions.sh names."""
    module, var, rel = GITOPS_CRDS[(api_version, kind)]
    return module_dir(module, component_version(var)) / rel


def gitops_schema_errors(obj: dict) -> list[str]:
    """Strict violations of a Flux or Argo CD object against its controller's own CRD."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    v = _crd_validator(gitops_crd_path(api_version, kind), api_version.split("/")[1])
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(v.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
