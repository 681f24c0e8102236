"""GitOps for real: commits to a git server start runs through the real Flux controllers.

A bare repository on the loopback git server (hack/cluster/git_server.py, `git http-backend`), a GitRepository and a
Kustomization (the options of manifests/gitops/flux-kustomization-grpo-exp3.yaml, a short interval) in the test's
namespace, the real source-controller and kustomize-controller (hack/cluster/flux.sh), and the launcher following
what Flux created. Simulated: the pods' containers (KWOK) and the verl log (simlog).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import kwok_support as ks
from launcher_helpers import CONFIG, PY, REPO, expected_rows, rows, run_launcher, serve_namespace, verl_lines

pytestmark = pytest.mark.cluster
STEPS = 5
INTERVAL_S = 5
FLUX_EXAMPLE = REPO / "manifests" / "gitops" / "flux-kustomization-grpo-exp3.yaml"


def _git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="e2e", GIT_AUTHOR_EMAIL="e2e@localhost", GIT_COMMITTER_NAME="e2e",
               GIT_COMMITTER_EMAIL="e2e@localhost", GIT_TERMINAL_PROMPT="0")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _render(info, ns: str, target: Path, *sets: str) -> str:
    """`launcher render --gitops -d target` plus a kustomization.yaml listing the files; returns the job name."""
    for old in target.glob("*.yaml"):
        old.unlink()
    target.mkdir(parents=True, exist_ok=True)
    args = ["render", CONFIG, "--gitops", "-d", str(target), "--set", f"scheduling.namespace={ns}"]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run([PY, "-m", "launcher", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "src")), timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in target.glob("*.yaml"))
    (target / "kustomization.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": files}))
    job = next(yaml.safe_load(p.read_text())["metadata"]["name"] for p in target.glob("*.yaml")
               if yaml.safe_load(p.read_text())["kind"] == "PyTorchJob")
    return job


def _flux_objects(ns: str, url: str) -> list[dict]:
    """The documented example, pointed at the test's repository and namespace, with a short interval."""
    repo, kust = [d for d in yaml.safe_load_all(FLUX_EXAMPLE.read_text()) if d]
    repo["metadata"].update(name="grpo-e2e", namespace=ns)
    repo["spec"].update(url=url, interval=f"{INTERVAL_S}s")
    kust["metadata"].update(name="grpo-e2e", namespace=ns)
    kust["spec"].update(interval=f"{INTERVAL_S}s", path="./experiments/current", retryInterval=f"{INTERVAL_S}s")
    kust["spec"]["sourceRef"]["name"] = "grpo-e2e"
    return [repo, kust]


def _jobs(info, ns: str) -> dict[str, dict]:
    items = json.loads(info.kubectl("-n", ns, "get", "pytorchjobs", "-o", "json", "--show-managed-fields").stdout)["items"]
    return {j["metadata"]["name"]: j for j in items}


def _kustomization(info, ns: str) -> dict:
    return json.loads(info.kubectl("-n", ns, "get", "kustomizations.kustomize.toolkit.fluxcd.io", "grpo-e2e",
                                   "-o", "json").stdout)


def _ready(ks_obj: dict) -> dict:
    return next((c for c in ks_obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})


@pytest.fixture
def gitops_repo(flux, namespace, tmp_path):
    """A fresh bare repository on the git server and a working clone; Flux objects removed first at teardown."""
    info, ns = flux, namespace
    root = ks.cluster_dir() / "flux" / "git"
    bare = root / f"{ns}.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    port = int(os.environ.get("GRPO_GIT_PORT", "18680"))
    url = f"http://127.0.0.1:{port}/{ns}.git"
    _git(work, "remote", "add", "origin", url)
    yield work, url
    # the Kustomization goes before the namespace's jobs (it would re-create them); prune: false keeps the objects
    info.kubectl("-n", ns, "delete", "kustomizations.kustomize.toolkit.fluxcd.io,gitrepositories.source.toolkit.fluxcd.io",
                 "--all", "--wait=true", "--timeout=60s", check=False)
    subprocess.run(["rm", "-rf", str(bare)], check=False)


def _condition(job: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))


def _pod_identities(info, ns: str, job: str) -> dict[str, tuple[str, int]]:
    """Each pod of the job: its uid and its containers' restarts (a re-created or restarted pod changes them)."""
    pods = json.loads(info.kubectl("-n", ns, "get", "pods", "-l", f"app.kubernetes.io/instance={job}",
                                   "-o", "json").stdout)["items"]
    assert pods and all("deletionTimestamp" not in p["metadata"] for p in pods), pods
    return {p["metadata"]["name"]: (p["metadata"]["uid"],
                                    sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])))
            for p in pods}


def _commit_push(work: Path, message: str) -> str:
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", message)
    _git(work, "push", "-q", "origin", "HEAD:main")
    return _git(work, "rev-parse", "HEAD")


def test_commits_start_runs_through_flux_and_flux_never_reruns_prunes_or_overwrites(flux, namespace, gitops_repo,
                                                                                    tmp_path):
    info, ns, runs = flux, namespace, tmp_path / "runs"
    work, url = gitops_repo
    lines = verl_lines(STEPS)
    serve_namespace(info, ns, lines)
    target = work / "experiments" / "current"
    delay = json.dumps({ks.POD_COMPLETE_DELAY: "45s"})
    exp3 = _render(info, ns, target, f"trainer.total_training_steps={STEPS}", f"scheduling.pod_annotations={delay}")
    sha3 = _commit_push(work, "exp3")
    for obj in _flux_objects(ns, url):
        info.kubectl("apply", "--server-side", "--field-manager=grpo-e2e", "-f", "-", input=json.dumps(obj))

    # 1. the commit starts exactly one job, which the launcher follows like a submitted run
    ks.wait_for(lambda: _jobs(info, ns).get(exp3), timeout=120, interval=1, what=f"Flux to create {exp3}")
    follow = subprocess.Popen([PY, "-m", "launcher", "logs", exp3, "-n", ns, "--follow"],
                              env=dict({k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
                                       KUBECONFIG=str(info.kubeconfig), LAUNCHER_RUNS_DIR=str(runs),
                                       PYTHONPATH=str(REPO / "src")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs = _jobs(info, ns)
    assert list(jobs) == [exp3]
    labels = jobs[exp3]["metadata"]["labels"]
    assert labels["kustomize.toolkit.fluxcd.io/name"] == "grpo-e2e" and labels["app.kubernetes.io/instance"] == exp3
    ks.wait_for(lambda: (_kustomization(info, ns).get("status", {}).get("lastAppliedRevision") or "").endswith(sha3),
                timeout=60, what="the Kustomization to report the exp3 commit")
    # running before the next commit: under CI load its pod had not started when exp4 appeared (stop 41's CI)
    ks.wait_for(lambda: _condition(_jobs(info, ns)[exp3], "Running"), timeout=120, interval=1,
                what=f"{exp3} to be Running")
    pods3 = _pod_identities(info, ns, exp3)

    # 2. a changed value is a new run (new name); the first keeps running, untouched
    delay4 = json.dumps({ks.POD_COMPLETE_DELAY: "20s"})
    exp4 = _render(info, ns, target, f"trainer.total_training_steps={STEPS}", f"scheduling.pod_annotations={delay4}",
                   "rollout.n=4", "data.max_response_length=512")
    assert exp4 != exp3 and exp4.startswith("grpo-exp3-")
    uid3 = jobs[exp3]["metadata"]["uid"]
    sha4 = _commit_push(work, "exp4: rollout.n 4, response length 512")
    ks.wait_for(lambda: _jobs(info, ns).get(exp4), timeout=120, interval=1, what=f"Flux to create {exp4}")
    jobs = _jobs(info, ns)
    assert set(jobs) == {exp3, exp4}
    assert jobs[exp3]["metadata"]["uid"] == uid3 and "deletionTimestamp" not in jobs[exp3]["metadata"]
    # untouched: its pods are the same ones, none restarted; it is still running, or (45 s on a loaded machine)
    # has finished
    conditions = jobs[exp3].get("status", {}).get("conditions", [])
    assert not {"Restarting", "Failed"} & {c["type"] for c in conditions}, conditions
    assert conditions[-1]["type"] in ("Running", "Succeeded") and conditions[-1]["status"] == "True", conditions
    assert _pod_identities(info, ns, exp3) == pods3

    out, err = follow.communicate(timeout=150)
    assert follow.returncode == 0, err[-3000:]
    assert rows(runs / exp3) == expected_rows(STEPS)
    rc, out, err = run_launcher(["wait", exp4, "-n", ns, "--timeout", "120"], info, runs, timeout=150)
    assert rc == 0, err
    rc, out, err = run_launcher(["report", str(runs / exp3)], info, runs)
    assert rc == 0 and (runs / exp3 / "report.md").is_file(), err

    # which commit started which run
    rc, out, err = run_launcher(["gitops-status", "-n", ns, "-o", "json"], info, runs)
    assert rc == 0, err
    by_job = {r["name"]: r["gitops"] for r in json.loads(out)["items"]}
    assert by_job[exp3]["kustomization"] == {"namespace": ns, "name": "grpo-e2e"}, by_job[exp3]
    assert by_job[exp3]["createdByRevision"]["revision"].endswith(sha3), by_job[exp3]
    assert by_job[exp4]["createdByRevision"]["revision"].endswith(sha4), by_job[exp4]

    # 3. many reconcile intervals after both finished: nothing re-created, pruned or overwritten
    before = _jobs(info, ns)
    reconciles = _kustomization(info, ns)["status"]["history"][0]["totalReconciliations"]
    time.sleep(8 * INTERVAL_S)
    after = _jobs(info, ns)
    assert set(after) == {exp3, exp4}
    for name in (exp3, exp4):
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert after[name]["spec"] == before[name]["spec"], name
        # Flux applied it once (create) and never again: its field-manager entry keeps the creation time
        applied = [m["time"] for m in after[name]["metadata"]["managedFields"] if m["manager"] == "kustomize-controller"]
        assert applied == [after[name]["metadata"]["creationTimestamp"]], after[name]["metadata"]["managedFields"]
        assert after[name]["status"]["conditions"][-1]["type"] == "Succeeded", after[name]["status"]
        managers = {m["manager"] for m in after[name]["metadata"]["managedFields"] if m.get("subresource") == "status"}
        assert "kustomize-controller" not in managers, managers
    assert _kustomization(info, ns)["status"]["history"][0]["totalReconciliations"] > reconciles  # it did reconcile
    assert (runs / exp3 / "report.md").is_file() and rows(runs / exp3) == expected_rows(STEPS)

    # 4. a broken commit is refused by the API server, reported by Flux and the launcher; the last good run stays.
    # Flux retries a failed apply every retryInterval and shows Ready=Unknown while it does: at the test's 5 s the
    # refusal was visible for a few seconds at a time, and the launcher's read landed in a retry under load (CI of
    # stop 37). A user's retryInterval is minutes; so is this one from here on.
    info.kubectl("-n", ns, "patch", "kustomizations.kustomize.toolkit.fluxcd.io", "grpo-e2e", "--type", "merge",
                 "-p", json.dumps({"spec": {"retryInterval": "10m"}}))
    bad = target / "02-pytorchjob-broken.yaml"
    doc = yaml.safe_load((target / next(p.name for p in target.glob("01-pytorchjob-*.yaml"))).read_text())
    doc["metadata"]["name"] = "grpo-exp3-broken"
    doc["spec"]["runPolicy"]["backoffLimit"] = "zero"  # the CRD's schema: an integer
    bad.write_text(yaml.safe_dump(doc))
    kfile = target / "kustomization.yaml"
    k = yaml.safe_load(kfile.read_text())
    k["resources"].append(bad.name)
    kfile.write_text(yaml.safe_dump(k))
    sha5 = _commit_push(work, "broken: backoffLimit is not an integer")

    def refused():
        obj = _kustomization(info, ns)
        r = _ready(obj)
        return obj if obj["status"].get("lastAttemptedRevision", "").endswith(sha5) and r.get("status") == "False" else None

    obj = ks.wait_for(refused, timeout=90, interval=1, what="Flux to report the broken commit")
    assert "backoffLimit" in _ready(obj)["message"], _ready(obj)
    assert obj["status"]["lastAppliedRevision"].endswith(sha4)
    assert set(_jobs(info, ns)) == {exp3, exp4}
    assert _jobs(info, ns)[exp4]["metadata"]["uid"] == after[exp4]["metadata"]["uid"]
    seen = []

    def launcher_reports_it():
        rc, out, err = run_launcher(["gitops-status", exp4, "-n", ns], info, runs)
        seen.append(out + err)
        assert rc == 0, out + err
        return "backoffLimit" in out and "Ready=False" in out

    # read until it shows: a reconcile of the broken revision can still be in flight (Ready=Unknown) at one read
    try:
        ks.wait_for(launcher_reports_it, timeout=120, interval=2, what="gitops-status to report the refusal")
    except TimeoutError:
        raise AssertionError(seen[-1] if seen else "gitops-status never ran") from None
