"""Least-privilege RBAC on the real API server.

A ServiceAccount bound to exactly what `launcher rbac` renders runs every launcher verb (submit, status,
list, logs, wait, delete, doctor) on every backend. Then each row of `launcher.render.rbac.CALLS` is taken away
in turn (one namespace, one ServiceAccount, the Role re-applied without that one verb): a verb that
needs it fails with one `error:` line naming the refused verb and resource (exit 3, no traceback), or,
for the optional cluster-wide reads, says what it could not check.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

import kueue_support as kq
import kwok_support as ks
import realnode as rn
from launcher_helpers import cri, job_name, run_launcher, submit_args, verl_lines
from rbac_support import apply, launcher_user

pytestmark = pytest.mark.cluster

RUNNING = "600s"  # the probe job keeps running for the whole test
SHORT = "5s"


def without(objs: list[dict], call) -> list[dict]:
    """The Role and ClusterRole of `objs` with `call.verb` on `call`'s resource removed.

    From both: a ClusterRole rule grants its verb in every namespace too (the cluster-wide `list pods`
    doctor needs also covers a run's pods), and the Role's rule is what a `--no-cluster-role` user has.
    """
    roles = []
    for kind in ("Role", "ClusterRole"):
        role = copy.deepcopy(next(o for o in objs if o["kind"] == kind))
        for rule in role["rules"]:
            if rule["apiGroups"] == [call.group] and rule["resources"] == [call.resource] and (
                    kind == "ClusterRole" or not call.cluster_scoped) and call.verb in rule["verbs"]:
                rule["verbs"].remove(call.verb)  # (the ClusterRole's pods rule has list, never watch)
        role["rules"] = [r for r in role["rules"] if r["verbs"]]
        roles.append(role)
    return roles


def wait_allowed(kube, call, ns: str, allowed: bool) -> None:
    """Until the authorizer (informer-fed, so not instant) agrees with the Role just applied."""
    resource, _, sub = call.resource.partition("/")
    ks.wait_for(lambda: kube.access_review(call.verb, call.group, resource, subresource=sub,
                                           namespace=None if call.cluster_scoped else ns)[0] is allowed,
                timeout=30, interval=0.2, what=f"{call.verb} {call.resource} allowed={allowed}")


def refused(result, call) -> None:
    rc, out, err = result
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 3 and len(errors) == 1, f"{call}: rc {rc}\n{out}{err}"
    assert f'cannot {call.verb} resource "{call.resource}"' in errors[0], errors[0]
    assert "Traceback" not in err, err


def ok(result, what) -> tuple[str, str]:
    rc, out, err = result
    assert rc == 0 and "Traceback" not in err, f"{what}: rc {rc}\n{out}{err}"
    return out, err


def flux_run(info, ns: str, job: str) -> None:
    """A suspended GitRepository + Kustomization in `ns` (the controllers leave them alone) and `job` labelled as
    Flux labels what it applies, so that `status` / `gitops-status` read both (the optional Flux rows of CALLS)."""
    import json

    for obj in (
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
         "metadata": {"name": "grpo-rbac", "namespace": ns},
         "spec": {"url": "http://127.0.0.1:9/none.git", "ref": {"branch": "main"}, "interval": "1h", "suspend": True}},
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
         "metadata": {"name": "grpo-rbac", "namespace": ns},
         "spec": {"sourceRef": {"kind": "GitRepository", "name": "grpo-rbac"}, "path": "./", "interval": "1h",
                  "prune": False, "suspend": True}},
    ):
        info.kubectl("apply", "--server-side", "--field-manager=grpo-e2e", "-f", "-", input=json.dumps(obj))
    info.kubectl("-n", ns, "label", "pytorchjob", job, "kustomize.toolkit.fluxcd.io/name=grpo-rbac",
                 f"kustomize.toolkit.fluxcd.io/namespace={ns}")


@pytest.fixture
def own_queue(kube_cluster, namespace):
    """The LocalQueue `grpo` in the test namespace, to a ClusterQueue of this test's own (kueue_support)."""
    kq.ensure_kueue()
    name = f"cq-{namespace}"
    kq.cluster_queue(kube_cluster, name, gpus=4)
    kq.local_queue(kube_cluster, namespace, cluster_queue=name)
    yield kq.LOCAL_QUEUE
    kq.delete_cluster_queue(kube_cluster, name)


def test_every_verb_works_with_exactly_the_rendered_rbac_and_each_call_is_needed(kube_cluster, trainer, flux,
                                                                                  namespace, own_queue, tmp_path):
    from launcher.kube import Kube
    from launcher.render.rbac import CALLS

    info, ns = kube_cluster, namespace
    user, objs, _ = launcher_user(info, ns, "launcher-user", tmp_path / "kubeconfig")
    kube = Kube.connect(str(user.kubeconfig))
    runs = tmp_path / "runs"

    def launcher(*args, timeout=180):
        return run_launcher(list(args), user, runs, timeout=timeout)

    def submit(steps, delay, *sets, extra=()):
        setargs = [a for s in sets for a in ("--set", s)]
        return launcher(*submit_args(ns, steps, delay, "--new", *setargs, *extra)), job_name(ns, steps, delay, *sets)

    # -- every verb with exactly the rendered Role and ClusterRole ------------------------------------------------
    res, job = submit(2, RUNNING)
    ok(res, "submit")
    ks.serve_logs(info, ns, f"{job}-master-0", cri(verl_lines(2)))
    ok(launcher("status", job, "-n", ns), "status")
    out, _ = ok(launcher("list", "-n", ns), "list")
    assert job in out
    ok(launcher("logs", job, "-n", ns), "logs")
    # a run sent to a Kueue LocalQueue (the real Kueue: kueue_support): status reads its Workload
    res, queued = submit(14, RUNNING, f"scheduling.queue={own_queue}")
    ok(res, "submit to a LocalQueue")
    out, _ = ok(launcher("status", queued, "-n", ns), "status of a queued run")
    assert f"LocalQueue {own_queue}, Workload " in out, out
    res, short = submit(3, SHORT)
    ok(res, "submit")
    ks.serve_logs(info, ns, f"{short}-master-0", cri(verl_lines(3)))
    ok(launcher("wait", short, "-n", ns, "--timeout", "120"), "wait")
    ok(launcher("delete", short, "-n", ns), "delete")
    res, ray = submit(2, RUNNING, "backend=rayjob")
    ok(res, "submit --set backend=rayjob")
    ok(launcher("status", ray, "-n", ns), "status of a RayJob")
    # a run Flux applied (labels as kustomize-controller sets them): status and gitops-status read Flux's objects
    flux_run(info, ns, job)
    out, _ = ok(launcher("status", job, "-n", ns), "status of a Flux run")
    assert f"gitops: Flux Kustomization {ns}/grpo-rbac, created by an unknown revision" in out, out
    out, _ = ok(launcher("gitops-status", job, "-n", ns), "gitops-status")
    assert f"source: GitRepository {ns}/grpo-rbac http://127.0.0.1:9/none.git branch main" in out, out
    res, tj = submit(2, RUNNING, "backend=trainjob")
    ok(res, "submit --set backend=trainjob")
    out, _ = ok(launcher("status", tj, "-n", ns), "status of a TrainJob")
    assert f"TrainJob {tj}" in out and f"jobset {tj}" in out, out
    rc, out, err = launcher("doctor", submit_args(ns, 2, RUNNING)[1], "-n", ns)
    assert "Traceback" not in err and rc in (0, 1), out + err
    assert any(ln.startswith("✓ rbac") for ln in out.splitlines()), out
    # data put: its copy pod on the real node (an exec needs a real kubelet), onto a claim in this namespace
    rn.ensure_real_node(info)
    host = Path(f"/tmp/{ns}-data")
    host.mkdir(mode=0o777)
    host.chmod(0o777)
    ks.bound_hostpath_claim(info, ns, "data-claim", f"{ns}-data", str(host), access="ReadWriteMany")
    local = tmp_path / "my-data"
    local.mkdir()
    (local / "train.parquet").write_bytes(bytes(range(256)) * 12)

    def data_put():
        # The copy pod (500m CPU) may wait for room: a real-training test in another lane can fill both real nodes for
        # minutes (a 2-node RayJob takes all of their 2 CPUs). The launcher's own --timeout ends first, so a pod that
        # never starts fails with its reason rather than with a killed subprocess.
        return launcher("data", "put", str(ks.REPO_ROOT / "configs" / "grpo-exp3-cpu.yaml"), str(local), "-n", ns,
                        "--set", "storage.claim_name=data-claim", "--timeout", "900", timeout=1000)

    out, _ = ok(data_put(), "data put")
    assert "train.parquet: sent; 3072 bytes verified on arrival" in out, out
    assert (host / "data" / "gsm8k" / "train.parquet").read_bytes() == (local / "train.parquet").read_bytes()
    # runs whose delete is refused half-way (after the job went): one each, the claims their own
    doomed = {}
    for steps, claim in ((8, None), (9, None), (11, "claim-11"), (12, "claim-12")):
        sets = (f"storage.claim_name={claim}", "storage.create=true") if claim else ()
        res, doomed[steps] = submit(steps, RUNNING, *sets)
        ok(res, f"submit {doomed[steps]}")
    for steps in (17, 18):  # TrainJob runs whose TrainingRuntime cannot be found / deleted
        res, doomed[steps] = submit(steps, RUNNING, "backend=trainjob")
        ok(res, f"submit {doomed[steps]}")

    # -- each call taken away in turn ------------------------------------------------------------------------------
    probes = {
        ("kubeflow.org", "pytorchjobs", "get", False): lambda: refused(launcher("status", job, "-n", ns), c),
        ("kubeflow.org", "pytorchjobs", "list", False): lambda: refused(launcher("list", "-n", ns), c),
        ("kubeflow.org", "pytorchjobs", "create", False): lambda: created_nothing(submit(5, SHORT), c),
        ("kubeflow.org", "pytorchjobs", "delete", False): lambda: refused(launcher("delete", job, "-n", ns), c),
        # NAME that is no PyTorchJob is looked up as a RayJob
        ("ray.io", "rayjobs", "get", False): lambda: refused(launcher("status", "not-a-pytorchjob", "-n", ns), c),
        ("ray.io", "rayjobs", "list", False): lambda: refused(launcher("list", "-n", ns), c),
        ("ray.io", "rayjobs", "create", False): lambda: created_nothing(submit(6, SHORT, "backend=rayjob"), c),
        ("ray.io", "rayjobs", "delete", False): lambda: refused(launcher("delete", ray, "-n", ns, "--no-wait"), c),
        # NAME that is neither a PyTorchJob nor a RayJob is looked up as a TrainJob
        ("trainer.kubeflow.org", "trainjobs", "get", False):
            lambda: refused(launcher("status", "not-a-pytorchjob", "-n", ns), c),
        ("trainer.kubeflow.org", "trainjobs", "list", False): lambda: refused(launcher("list", "-n", ns), c),
        ("trainer.kubeflow.org", "trainjobs", "create", False):
            lambda: created_nothing(submit(15, SHORT, "backend=trainjob"), c),
        ("trainer.kubeflow.org", "trainjobs", "delete", False):
            lambda: refused(launcher("delete", tj, "-n", ns, "--no-wait"), c),
        ("trainer.kubeflow.org", "trainingruntimes", "create", False):
            lambda: created_nothing(submit(16, SHORT, "backend=trainjob"), c),
        ("trainer.kubeflow.org", "trainingruntimes", "list", False):
            lambda: refused(launcher("delete", doomed[17], "-n", ns, "--no-wait"), c),
        ("trainer.kubeflow.org", "trainingruntimes", "delete", False):
            lambda: refused(launcher("delete", doomed[18], "-n", ns, "--no-wait"), c),
        ("jobset.x-k8s.io", "jobsets", "get", False):
            lambda: printed(launcher("status", tj, "-n", ns), "cannot get jobsets.jobset.x-k8s.io (forbidden)"),
        ("", "configmaps", "create", False): lambda: refused(submit(7, SHORT)[0], c),
        ("", "configmaps", "list", False): lambda: refused(launcher("delete", doomed[8], "-n", ns, "--no-wait"), c),
        ("", "configmaps", "delete", False): lambda: refused(launcher("delete", doomed[9], "-n", ns, "--no-wait"), c),
        ("", "persistentvolumeclaims", "create", False):
            lambda: refused(submit(10, SHORT, "storage.claim_name=claim-10", "storage.create=true")[0], c),
        ("", "persistentvolumeclaims", "list", False):
            lambda: refused(launcher("delete", doomed[11], "-n", ns, "--no-wait"), c),
        ("", "persistentvolumeclaims", "delete", False):
            lambda: refused(launcher("delete", doomed[12], "-n", ns, "--no-wait"), c),
        ("", "pods", "list", False): lambda: refused(launcher("status", job, "-n", ns), c),
        ("", "pods/log", "get", False): lambda: refused(launcher("logs", job, "-n", ns), c),
        # data put's copy pod: refused to start it; to delete it once the file is in (it stays, running); to exec
        # into it (a websocket upgrade, which Kubernetes 1.35 authorizes as get and as create)
        ("", "pods", "create", False): lambda: refused(data_put(), c),
        ("", "pods", "delete", False): lambda: refused(data_put(), c),
        ("", "pods/exec", "get", False): lambda: refused(data_put(), c),
        # (Kubernetes refuses the second check with an empty reason: the launcher's hint names what is missing)
        ("", "pods/exec", "create", False): lambda: exec_refused(data_put()),
        # following: job and pod state through watches (launcher.kube.informer)
        ("kubeflow.org", "pytorchjobs", "watch", False): lambda: refused(launcher("logs", job, "-n", ns, "-f"), c),
        ("ray.io", "rayjobs", "watch", False): lambda: refused(launcher("logs", ray, "-n", ns, "-f"), c),
        ("trainer.kubeflow.org", "trainjobs", "watch", False): lambda: refused(launcher("logs", tj, "-n", ns, "-f"), c),
        ("", "pods", "watch", False): lambda: refused(launcher("logs", job, "-n", ns, "-f"), c),
        ("", "events", "list", False): lambda: refused(launcher("status", job, "-n", ns), c),
        # the config sets no queue: doctor's access review is what notices
        ("kueue.x-k8s.io", "localqueues", "get", False): lambda: doctor_says("get kueue.x-k8s.io/localqueues"),
        ("kueue.x-k8s.io", "localqueues", "list", False): lambda: doctor_says("list kueue.x-k8s.io/localqueues"),
        ("kueue.x-k8s.io", "workloads", "list", False):
            lambda: printed(launcher("status", queued, "-n", ns), "cannot list workloads.kueue.x-k8s.io (forbidden)"),
        # the optional cluster-wide reads: the verb goes on and says what it skipped
        ("", "nodes", "list", True): lambda: warned(submit(13, SHORT, extra=("--dry-run=server",))[0],
                                                    "warning: cannot list nodes to check for"),
        ("", "namespaces", "get", True): lambda: doctor_says(f"{ns} (cannot read Namespace objects: assumed to exist)"),
        ("", "pods", "list", True): lambda: doctor_says("listing pods in all namespaces is forbidden"),
        ("kueue.x-k8s.io", "clusterqueues", "get", True): lambda: doctor_says("get kueue.x-k8s.io/clusterqueues"),
        # Flux's objects (another namespace in real use): one line instead of the details
        ("kustomize.toolkit.fluxcd.io", "kustomizations", "get", True): lambda: printed(
            launcher("gitops-status", job, "-n", ns),
            f"cannot get kustomizations.kustomize.toolkit.fluxcd.io in namespace {ns} (forbidden)"),
        ("source.toolkit.fluxcd.io", "gitrepositories", "get", True): lambda: printed(
            launcher("gitops-status", job, "-n", ns),
            f"cannot get gitrepositories.source.toolkit.fluxcd.io in namespace {ns} (forbidden)"),
    }

    def created_nothing(submitted, call):
        result, name = submitted
        refused(result, call)
        assert f"rolled back: deleted ConfigMap {name}-spec" in result[2], result[2]
        cms = info.kubectl("get", "configmaps", "-n", ns, "-l", f"app.kubernetes.io/instance={name}",
                           "-o", "name").stdout.split()
        assert cms == [], cms

    def exec_refused(result):
        rc, out, err = result
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert rc == 3 and len(errors) == 1 and "Traceback" not in err, f"rc {rc}\n{out}{err}"
        assert errors[0].startswith("error: forbidden (403) to exec in pod grpo-exp3-cpu-data-put: ") and \
            errors[0].endswith("(an exec needs get and create on pods/exec: `launcher rbac`)"), errors[0]

    def printed(result, text):
        out, _ = ok(result, text)
        assert text in out, out

    def warned(result, text):
        _, err = ok(result, text)
        assert text in err, err

    def doctor_says(text):
        rc, out, err = launcher("doctor", submit_args(ns, 2, RUNNING)[1], "-n", ns)
        assert rc in (0, 1) and "Traceback" not in err and not err.startswith("error:"), out + err
        assert text in out, out

    assert set(probes) == {(c.group, c.resource, c.verb, c.cluster_scoped) for c in CALLS}  # no call unprobed
    full = [o for o in objs if o["kind"] in ("Role", "ClusterRole")]
    for c in CALLS:
        apply(info, without(objs, c))
        wait_allowed(kube, c, ns, False)
        probes[(c.group, c.resource, c.verb, c.cluster_scoped)]()
        apply(info, full)
        wait_allowed(kube, c, ns, True)

    ok(data_put(), "data put with everything granted again")  # ...which removes the copy pod
    assert not rn.pods(info, ns, "app.kubernetes.io/component=data")
    shutil.rmtree(host, ignore_errors=True)
    # with everything granted again, the runs still there go (deleted, or going: operators' finalizers)
    info.kubectl("-n", ns, "delete", "kustomizations.kustomize.toolkit.fluxcd.io,gitrepositories.source.toolkit.fluxcd.io",
                 "--all", "--wait=true", "--timeout=60s", check=False)
    for kind, name in (("pytorchjob", job), ("rayjob", ray), ("trainjob", tj)):
        ok(launcher("delete", name, "-n", ns, "--no-wait"), f"delete {name}")
        got = info.kubectl("get", kind, name, "-n", ns, "-o", "jsonpath={.metadata.deletionTimestamp}", check=False)
        assert got.stdout.strip() or "NotFound" in got.stderr, (got.stdout, got.stderr)
