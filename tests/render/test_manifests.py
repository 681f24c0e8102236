"""manifests/: the GitOps output is fresh, builds with kustomize, and is what the launcher renders.

- `make manifests-check` (hack/gen_manifests.py --check) passes, and catches a stale file;
- each experiment's kustomization lists exactly its rendered files, and `kubectl kustomize` (the
  real kubectl from `make tools`) builds exactly `launcher render --gitops` objects, in render (apply)
  order; grpo-exp3-trainjob/ is grpo-exp3 with `--backend trainjob` (TrainingRuntime before TrainJob);
- the objects validate strictly against the operators' CRDs and Kubernetes' OpenAPI;
- GitOps output carries no TTL self-deletion; the Argo CD / Flux examples point at these directories
  with the sync options the README explains;
- grpo-exp3-eval/ is `launcher eval configs/grpo-exp3.yaml --baseline`'s job with gitops=True (the
  config has no storage.claim_name, so a checkpoint cannot be evaluated from git).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest
import yaml

from crd_schema import schema_errors
from helm_tools import ROOT, ToolMissing, tool
from launcher.spec.load import load_spec
from launcher.render.manifests import render

MANIFESTS = ROOT / "manifests"
EVALS = ("grpo-exp3-eval",)

_spec = importlib.util.spec_from_file_location("gen_manifests", ROOT / "hack" / "gen_manifests.py")
gen_manifests = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("gen_manifests", gen_manifests)
_spec.loader.exec_module(gen_manifests)

EXPERIMENTS = ("grpo-exp3", "grpo-exp4", "grpo-exp3-trainjob")
assert EXPERIMENTS == tuple(gen_manifests.RENDERS)
assert EVALS == tuple(gen_manifests.EVALS)
# What each directory holds: a glob that finds nothing must fail, not check nothing.
KINDS = {"grpo-exp3": ["ConfigMap", "PyTorchJob"], "grpo-exp4": ["ConfigMap", "PyTorchJob"],
         "grpo-exp3-trainjob": ["ConfigMap", "TrainingRuntime", "TrainJob"],
         "grpo-exp3-eval": ["ConfigMap", "PyTorchJob"]}


def _rendered(directory: str) -> list[dict]:
    """What `launcher render configs/<exp>.yaml [--backend B] --gitops` renders for a manifests/ directory."""
    exp, args = gen_manifests.RENDERS[directory]
    backend = dict(zip(args[::2], args[1::2])).get("--backend")
    return render(load_spec(ROOT / "configs" / f"{exp}.yaml", backend=backend), gitops=True)


def _kubectl() -> str:
    try:
        return tool("kubectl")
    except ToolMissing as exc:
        pytest.fail(str(exc))


def test_manifests_are_fresh(capsys):
    assert gen_manifests.check(MANIFESTS) == 0, capsys.readouterr().err


def test_stale_check_catches_an_edit_and_a_leftover(tmp_path, capsys):
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy)
    job = next((copy / "grpo-exp3").glob("01-*.yaml"))
    job.write_text(job.read_text().replace("backoffLimit: 0", "backoffLimit: 3"))
    (copy / "grpo-exp4" / "00-configmap-grpo-exp4-00000000-spec.yaml").write_text("{}\n")
    assert gen_manifests.check(copy) == 1
    err = capsys.readouterr().err
    assert job.name in err and "00000000" in err and "make manifests" in err


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_kustomize_builds_exactly_the_gitops_render(exp):
    kustomization = yaml.safe_load((MANIFESTS / exp / "kustomization.yaml").read_text())
    files = sorted(p.name for p in (MANIFESTS / exp).glob("[0-9][0-9]-*.yaml"))
    assert kustomization["resources"] == files
    out = subprocess.run([_kubectl(), "kustomize", str(MANIFESTS / exp)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    # the same objects in the same (apply) order: sortOptions fifo keeps kustomize from re-sorting them
    assert [o for o in yaml.safe_load_all(out) if o] == _rendered(exp)
    assert kustomization["sortOptions"] == {"order": "fifo"}


def test_trainjob_directory_applies_the_runtime_before_the_trainjob():
    """Trainer's webhook refuses a TrainJob whose TrainingRuntime does not exist yet: the runtime comes first."""
    out = subprocess.run([_kubectl(), "kustomize", str(MANIFESTS / "grpo-exp3-trainjob")], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    kinds = [o["kind"] for o in yaml.safe_load_all(out) if o]
    assert kinds == ["ConfigMap", "TrainingRuntime", "TrainJob"]
    job = [o for o in yaml.safe_load_all(out) if o][-1]
    assert job["spec"]["runtimeRef"]["name"] == job["metadata"]["name"]


def _eval_expected() -> dict:
    """`launcher eval configs/grpo-exp3.yaml --baseline`, rendered for GitOps (no TTL)."""
    from launcher.cli.commands.eval import entry_args, models_key
    from launcher.spec.names import eval_job_name

    spec = load_spec(ROOT / "configs" / "grpo-exp3.yaml")
    name = eval_job_name(spec, models_key(True, None))
    objects = render(spec, component="eval", gitops=True, entry_args=entry_args(True, None), instance=name)
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_eval_kustomize_builds_exactly_the_baseline_eval_job():
    d = MANIFESTS / "grpo-exp3-eval"
    kustomization = yaml.safe_load((d / "kustomization.yaml").read_text())
    files = sorted(p.name for p in d.glob("[0-9][0-9]-*.yaml"))
    assert kustomization["resources"] == files and len(files) == 2
    out = subprocess.run([_kubectl(), "kustomize", str(d)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    built = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out) if o}
    assert built == _eval_expected()
    job = next(o for o in built.values() if o["kind"] == "PyTorchJob")
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "eval"
    assert job["metadata"]["name"].startswith("grpo-exp3-eval-")
    command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert command[-3:] == ["--mode", "eval", "--baseline"]
    # the training objects are not in the eval directory, and the eval job is not in the training one
    train = {p.name for p in (MANIFESTS / "grpo-exp3").glob("*.yaml")}
    assert not train & set(files)


def test_eval_manifests_are_the_eval_commands_objects(capsys):
    """The generator renders what `launcher eval ... --baseline --dry-run` prints, less the TTL."""
    from launcher.cli.main import main as cli

    assert cli(["eval", str(ROOT / "configs" / "grpo-exp3.yaml"), "--baseline", "--dry-run"]) == 0
    printed = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    for obj in printed:
        obj.get("spec", {}).get("runPolicy", {}).pop("ttlSecondsAfterFinished", None)
        obj.get("spec", {}).pop("ttlSecondsAfterFinished", None)
    assert {(o["kind"], o["metadata"]["name"]): o for o in printed} == _eval_expected()


def test_stale_check_catches_a_stale_eval_directory(tmp_path, capsys):
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy)
    job = next((copy / "grpo-exp3-eval").glob("01-*.yaml"))
    job.write_text(job.read_text().replace("--baseline", "--checkpoint"))
    assert gen_manifests.check(copy) == 1
    assert f"grpo-exp3-eval/{job.name} differs" in capsys.readouterr().err
    shutil.rmtree(copy / "grpo-exp3-eval")
    assert gen_manifests.check(copy) == 1
    assert "grpo-exp3-eval/kustomization.yaml missing" in capsys.readouterr().err


def test_manifests_holds_exactly_the_expected_directories():
    """Every generated directory is there (and nothing else): the per-directory tests below cannot pass on a
    missing or empty one."""
    assert sorted(d.name for d in MANIFESTS.iterdir() if d.is_dir()) == sorted((*EXPERIMENTS, *EVALS, "gitops"))
    assert set(KINDS) == {*EXPERIMENTS, *EVALS}


@pytest.mark.parametrize("exp", (*EXPERIMENTS, *EVALS))
def test_manifests_validate_against_real_schemas_and_never_self_delete(exp):
    paths = sorted((MANIFESTS / exp).glob("[0-9][0-9]-*.yaml"))
    # the glob must find the directory's objects, one file each, as its kustomization lists them
    assert [p.name for p in paths] == yaml.safe_load((MANIFESTS / exp / "kustomization.yaml").read_text())["resources"]
    objs = [yaml.safe_load(path.read_text()) for path in paths]
    assert [o["kind"] for o in objs] == KINDS[exp], f"manifests/{exp}/ holds {[p.name for p in paths]}"
    for path, obj in zip(paths, objs):
        assert schema_errors(obj) == [], path.name
        assert "ttlSecondsAfterFinished" not in path.read_text(), path.name


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob", "trainjob"])
def test_gitops_with_a_ttl_config_drops_it(backend):
    spec = load_spec(ROOT / "configs" / "grpo-exp3.yaml", ["run_policy.ttl_seconds_after_finished=60"], backend)
    assert "ttlSecondsAfterFinished" in str(render(spec))
    assert "ttlSecondsAfterFinished" not in str(render(spec, gitops=True))


def test_gitops_examples_point_at_the_manifests_with_safe_options():
    argo = yaml.safe_load((MANIFESTS / "gitops" / "argocd-application-grpo-exp3.yaml").read_text())
    assert argo["kind"] == "Application" and argo["spec"]["source"]["path"] == "manifests/grpo-exp3"
    policy = argo["spec"]["syncPolicy"]
    assert policy["automated"]["prune"] is False and policy["automated"]["selfHeal"] is False
    assert "Replace=false" in policy["syncOptions"] and "RespectIgnoreDifferences=true" in policy["syncOptions"]
    ignored = {(d["kind"], p) for d in argo["spec"]["ignoreDifferences"] for p in d["jsonPointers"]}
    assert ignored == {("PyTorchJob", "/spec/runPolicy/suspend"), ("RayJob", "/spec/suspend")}

    flux = [d for d in yaml.safe_load_all((MANIFESTS / "gitops" / "flux-kustomization-grpo-exp3.yaml").read_text())]
    ks = next(d for d in flux if d["kind"] == "Kustomization")
    assert ks["spec"]["path"] == "./manifests/grpo-exp3"
    assert ks["spec"]["prune"] is False and ks["spec"]["force"] is False and ks["spec"]["wait"] is False
    assert "kustomize.toolkit.fluxcd.io/ssa: IfNotPresent" in ks["spec"]["patches"][0]["patch"]
    assert (MANIFESTS / ks["spec"]["path"].removeprefix("./manifests/")).is_dir()


def test_flux_patch_applies_to_every_rendered_object(tmp_path):
    """The Flux example's patch, run through the real kustomize, annotates the ConfigMap and the job."""
    flux = list(yaml.safe_load_all((MANIFESTS / "gitops" / "flux-kustomization-grpo-exp3.yaml").read_text()))
    patches = next(d for d in flux if d["kind"] == "Kustomization")["spec"]["patches"]
    work = tmp_path / "k"
    shutil.copytree(MANIFESTS / "grpo-exp3", work)
    kz = yaml.safe_load((work / "kustomization.yaml").read_text())
    kz["patches"] = patches
    (work / "kustomization.yaml").write_text(yaml.safe_dump(kz))
    out = subprocess.run([_kubectl(), "kustomize", str(work)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    objs = [o for o in yaml.safe_load_all(out) if o]
    assert len(objs) == 2
    for o in objs:
        assert o["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/ssa"] == "IfNotPresent"


@pytest.mark.parametrize("example", ["argocd-application-grpo-exp3.yaml", "flux-kustomization-grpo-exp3.yaml"])
def test_gitops_examples_validate_strictly_against_the_controllers_own_crds(example):
    """Argo CD's Application CRD (argo-cd/v3 at ARGOCD_VERSION: schema only, no Argo CD runs here) and Flux's
    GitRepository/Kustomization CRDs (at the versions the local cluster runs), strict: an unknown or misspelt
    field is an error, as `kubectl apply --validate=strict` would say."""
    from crd_schema import gitops_schema_errors

    docs = [d for d in yaml.safe_load_all((MANIFESTS / "gitops" / example).read_text()) if d]
    assert docs
    for d in docs:
        assert gitops_schema_errors(d) == [], (example, d["kind"])


def test_gitops_schema_check_catches_a_misspelt_option():
    from crd_schema import gitops_schema_errors

    argo = yaml.safe_load((MANIFESTS / "gitops" / "argocd-application-grpo-exp3.yaml").read_text())
    argo["spec"]["syncPolicy"]["automated"]["selfheal"] = False  # Argo CD's field is selfHeal
    assert any("selfheal" in e for e in gitops_schema_errors(argo))
    flux = [d for d in yaml.safe_load_all((MANIFESTS / "gitops" / "flux-kustomization-grpo-exp3.yaml").read_text())]
    ks = next(d for d in flux if d["kind"] == "Kustomization")
    ks["spec"]["prune"] = "false"  # a string where the CRD wants a boolean
    assert any(e.startswith("spec/prune:") for e in gitops_schema_errors(ks))
    repo = next(d for d in flux if d["kind"] == "GitRepository")
    del repo["spec"]["url"]
    assert any("'url' is a required property" in e for e in gitops_schema_errors(repo))
