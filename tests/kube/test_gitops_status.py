"""`launcher gitops-status` and the `gitops:` line of `status`: which Flux Kustomization applied a run, its
source and last apply, and the git revision that created the run (derived from the Kustomization's history).

The revision matching is checked on hand-written histories (meta.History: newest first, at most 5); the verbs
against a recording fake API server (tests/kube_fakes.py). Real Flux controllers applying a commit are the
lead's e2e tests (tests/e2e/, GRPO_FLUX=1)."""
from __future__ import annotations

import json

import pytest

from kube_fakes import CLI_NS, FakeApiServer, cli_api  # noqa: F401 - cli_api: fixture `api`
from launcher.cli.main import main
from launcher.kube.gitops import creating_revision

NS = CLI_NS
PTJ = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"
RJ = f"/apis/ray.io/v1/namespaces/{NS}/rayjobs"
KS = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/grpo-exp3"
GR = "/apis/source.toolkit.fluxcd.io/v1/namespaces/flux-system/gitrepositories/grpo-launcher"
SHA = {c: f"main@sha1:{c * 40}" for c in "abcdef0123"}


def snap(rev: str, first: str, last: str | None = None, status: str = "ReconciliationSucceeded") -> dict:
    return {"digest": f"sha256:{rev[-6:]}", "firstReconciled": first, "lastReconciled": last or first,
            "lastReconciledDuration": "1.2s", "lastReconciledStatus": status, "totalReconciliations": 1,
            "metadata": {"revision": rev}}


# -- revision matching --------------------------------------------------------------------------------------------

def test_the_first_succeeded_snapshot_at_or_after_the_job_created_it():
    history = [snap(SHA["b"], "2026-01-01T10:05:00Z"), snap(SHA["a"], "2026-01-01T10:00:03Z", "2026-01-01T10:04:00Z")]
    r = creating_revision(history, "2026-01-01T10:00:02Z")
    assert (r.revision, r.certain, r.note) == (SHA["a"], True, "")
    assert r.first_reconciled == "2026-01-01T10:00:03Z"
    assert creating_revision(history, "2026-01-01T10:04:30Z").revision == SHA["b"]


def test_same_second_counts_as_after_and_fractions_are_floored():
    # the job at .7 and firstReconciled at .2 of the same second: the API server and Flux both keep seconds
    history = [snap(SHA["b"], "2026-01-01T10:00:05.2Z"), snap(SHA["a"], "2026-01-01T10:00:01Z")]
    r = creating_revision(history, "2026-01-01T10:00:05.7Z")
    assert (r.revision, r.certain) == (SHA["b"], True)
    # one second later is no longer "after": nothing first applied since then, nothing spans it
    assert creating_revision(history, "2026-01-01T10:00:06Z").revision is None


def test_two_snapshots_first_applied_in_the_jobs_second_are_uncertain():
    history = [snap(SHA["b"], "2026-01-01T10:00:05Z"), snap(SHA["a"], "2026-01-01T10:00:05Z")]
    r = creating_revision(history, "2026-01-01T10:00:05Z")
    assert r.revision == SHA["a"] and not r.certain  # the older one (later in the newest-first list) came first
    assert "2 snapshots were first applied in the same second" in r.note


def test_a_failed_snapshot_between_is_skipped():
    history = [snap(SHA["c"], "2026-01-01T10:09:00Z"),
               snap(SHA["b"], "2026-01-01T10:05:00Z", status="ReconciliationFailed"),
               snap(SHA["a"], "2026-01-01T10:00:00Z")]
    r = creating_revision(history, "2026-01-01T10:04:59Z")
    assert (r.revision, r.certain) == (SHA["c"], True)
    assert r.as_dict()["firstReconciled"] == "2026-01-01T10:09:00Z"


def test_a_job_older_than_the_history_is_unknown():
    history = [snap(SHA[c], f"2026-01-01T10:0{i}:00Z") for i, c in enumerate("edcba")][::-1]
    assert len(history) == 5
    # the job at 09:59 was created by a snapshot that rotated out; every kept one is newer than the job
    r = creating_revision(history[:4] + [snap(SHA["0"], "2026-01-01T10:00:30Z", status="ReconciliationFailed")],
                          "2026-01-01T12:00:00Z")
    assert r.revision is None and r.line() == "unknown (older than the Kustomization's history of 5)"


def test_history_rotated_and_all_newer_than_the_job_is_uncertain():
    # five distinct digests applied after the job: the one that created it may have rotated out
    history = [snap(SHA[c], f"2026-01-01T10:0{i}:00Z") for i, c in enumerate("abcde")][::-1]
    r = creating_revision(history, "2026-01-01T09:59:00Z")
    assert r.revision == SHA["a"] and not r.certain and "rotated out" in r.note
    # the same history, but one snapshot last reconciled before the job: nothing older can be after the job
    history[-1] = snap(SHA["0"], "2026-01-01T09:00:00Z", "2026-01-01T09:58:00Z")
    r = creating_revision(history, "2026-01-01T09:59:00Z")
    assert (r.revision, r.certain) == (SHA["b"], True)


def test_two_jobs_from_two_revisions():
    history = [snap(SHA["b"], "2026-01-01T11:00:01Z", "2026-01-01T11:30:00Z"),
               snap(SHA["a"], "2026-01-01T10:00:01Z", "2026-01-01T10:50:00Z")]
    assert creating_revision(history, "2026-01-01T10:00:00Z").revision == SHA["a"]
    assert creating_revision(history, "2026-01-01T11:00:00Z").revision == SHA["b"]


def test_a_job_re_created_by_a_snapshot_that_kept_reconciling_names_it_as_re_applied():
    history = [snap(SHA["a"], "2026-01-01T10:00:00Z", "2026-01-01T12:00:00Z")]
    r = creating_revision(history, "2026-01-01T11:00:00Z")
    assert r.revision == SHA["a"] and not r.certain and r.note.startswith("re-applied")


def test_no_history_or_no_timestamp_is_unknown():
    assert creating_revision([], "2026-01-01T10:00:00Z").revision is None
    assert creating_revision([snap(SHA["a"], "2026-01-01T10:00:00Z")], None).note == "the job has no creationTimestamp"


# -- the verbs against a fake API server -------------------------------------------------------------------------

def job(name, created, flux=True, experiment="grpo-exp3"):
    labels = {"app.kubernetes.io/part-of": "grpo-launcher", "app.kubernetes.io/managed-by": "grpo-launcher",
              "grpo.launcher.io/experiment": experiment, "app.kubernetes.io/instance": name}
    if flux:
        labels |= {"kustomize.toolkit.fluxcd.io/name": "grpo-exp3", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "creationTimestamp": created, "uid": name},
            "status": {"conditions": [{"type": "Running", "status": "True"}]}}


def kustomization(ready="True", reason="ReconciliationSucceeded", message=f"Applied revision: {SHA['b']}",
                  attempted=SHA["b"]):
    return {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "grpo-exp3", "namespace": "flux-system"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "grpo-launcher"}, "path": "./manifests/grpo-exp3"},
            "status": {"lastAppliedRevision": SHA["b"], "lastAttemptedRevision": attempted,
                       "conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": message}],
                       "history": [snap(SHA["b"], "2026-01-01T11:00:01Z", "2026-01-01T11:30:00Z"),
                                   snap(SHA["a"], "2026-01-01T10:00:01Z", "2026-01-01T10:50:00Z")]}}


GITREPO = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
           "metadata": {"name": "grpo-launcher", "namespace": "flux-system"},
           "spec": {"url": "http://127.0.0.1:9418/grpo.git", "ref": {"branch": "main"}, "interval": "1m"},
           "status": {"artifact": {"revision": SHA["b"]}}}


def cluster(api: FakeApiServer, jobs, *, flux=True, ks=None, repo=GITREPO):
    api.routes[("GET", PTJ)] = (200, {"items": jobs})
    api.routes[("GET", RJ)] = (200, {"items": []})
    for j in jobs:
        api.routes[("GET", f"{PTJ}/{j['metadata']['name']}")] = (200, j)
        api.routes[("GET", f"/api/v1/namespaces/{NS}/pods")] = (200, {"items": []})
        api.routes[("GET", f"/api/v1/namespaces/{NS}/events")] = (200, {"items": []})
    if flux:
        api.routes[("GET", "/apis/kustomize.toolkit.fluxcd.io/v1")] = (200, {"resources": [{"name": "kustomizations"}]})
        api.routes[("GET", KS)] = (200, ks or kustomization())
        if repo is not None:
            api.routes[("GET", GR)] = (200, repo)


def test_gitops_status_names_kustomization_source_ready_and_each_runs_revision(api, capsys):
    cluster(api, [job("grpo-exp3-aaaa1111", "2026-01-01T10:00:00Z"), job("grpo-exp3-bbbb2222", "2026-01-01T11:00:00Z"),
                  job("grpo-exp4-cccc3333", "2026-01-01T11:10:00Z", flux=False, experiment="grpo-exp4")])
    assert main(["gitops-status", "-n", NS]) == 0
    out = capsys.readouterr().out
    blocks = out.split("PyTorchJob ")[1:]
    assert [b.split()[0] for b in blocks] == ["grpo-exp4-cccc3333", "grpo-exp3-bbbb2222", "grpo-exp3-aaaa1111"]
    assert "not created by Flux (no kustomize.toolkit.fluxcd.io labels): submitted by the launcher / applied by hand" \
        in blocks[0]
    assert "kustomization: flux-system/grpo-exp3" in blocks[1]
    assert f"source: GitRepository flux-system/grpo-launcher http://127.0.0.1:9418/grpo.git branch main, artifact {SHA['b']}" \
        in blocks[1]
    assert f"ready: Ready=True ReconciliationSucceeded: Applied revision: {SHA['b']}" in blocks[1]
    assert f"lastAppliedRevision: {SHA['b']}" in blocks[1]
    assert f"created by revision: {SHA['b']}, first applied 2026-01-01T11:00:01Z (from Flux's history)" in blocks[1]
    assert f"created by revision: {SHA['a']}, first applied 2026-01-01T10:00:01Z (from Flux's history)" in blocks[2]
    assert "Flux is not installed" not in out


def test_gitops_status_json_and_one_experiment(api, capsys):
    cluster(api, [job("grpo-exp3-aaaa1111", "2026-01-01T10:00:00Z")])
    assert main(["gitops-status", "grpo-exp3", "-n", NS, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "GitOpsStatusList" and doc["fluxInstalled"] is True
    g = doc["items"][0]["gitops"]
    assert doc["items"][0]["name"] == "grpo-exp3-aaaa1111"
    assert g["kustomization"] == {"namespace": "flux-system", "name": "grpo-exp3"}
    assert g["source"]["url"] == "http://127.0.0.1:9418/grpo.git" and g["source"]["ref"] == {"branch": "main"}
    assert g["createdByRevision"]["revision"] == SHA["a"] and g["createdByRevision"]["certain"] is True
    assert g["ready"]["status"] == "True" and g["lastAttemptedRevision"] == SHA["b"]
    # the experiment's runs were listed by label (the launcher's selector plus the experiment)
    sel = [q.get("labelSelector") for m, p, q, _ in api.requests if p == PTJ]
    assert sel and all("grpo.launcher.io/experiment=grpo-exp3" in s for s in sel)


def test_a_broken_commit_shows_the_api_servers_refusal(api, capsys):
    msg = ('PyTorchJob/team-a/grpo-exp3-dddd4444 dry-run failed: PyTorchJob.kubeflow.org "grpo-exp3-dddd4444" is '
           'invalid: spec.pytorchReplicaSpecs: Required value')
    cluster(api, [job("grpo-exp3-bbbb2222", "2026-01-01T11:00:00Z")],
            ks=kustomization("False", "ReconciliationFailed", msg, attempted=SHA["c"]))
    assert main(["gitops-status", "grpo-exp3-bbbb2222", "-n", NS]) == 0
    out = capsys.readouterr().out
    assert f"ready: Ready=False ReconciliationFailed: {msg}" in out
    assert f"lastAttemptedRevision: {SHA['c']}" in out and f"lastAppliedRevision: {SHA['b']}" in out
    assert f"created by revision: {SHA['b']}" in out


def test_without_flux_installed_it_says_so_and_exits_0(api, capsys):
    cluster(api, [job("grpo-exp4-cccc3333", "2026-01-01T11:10:00Z", flux=False, experiment="grpo-exp4"),
                  job("grpo-exp3-aaaa1111", "2026-01-01T10:00:00Z")], flux=False)
    assert main(["gitops-status", "-n", NS]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Flux is not installed: the cluster serves no kustomize.toolkit.fluxcd.io/v1 Kustomization\n")
    assert "submitted by the launcher / applied by hand" in out
    assert "applied by Flux Kustomization flux-system/grpo-exp3, but Flux is not installed" in out
    assert not any(p.startswith("/apis/kustomize.toolkit.fluxcd.io/v1/namespaces") for _, p, _, _ in api.requests)


def test_forbidden_kustomization_or_gitrepository_is_one_line(api, capsys):
    cluster(api, [job("grpo-exp3-aaaa1111", "2026-01-01T10:00:00Z")], repo=None)
    api.status("GET", GR, 403, 'gitrepositories.source.toolkit.fluxcd.io "grpo-launcher" is forbidden', "Forbidden")
    assert main(["gitops-status", "-n", NS]) == 0
    out = capsys.readouterr().out
    assert "source: GitRepository flux-system/grpo-launcher: cannot get gitrepositories.source.toolkit.fluxcd.io " \
           "in namespace flux-system (forbidden)" in out
    assert f"created by revision: {SHA['a']}" in out  # the Kustomization was still read
    api.status("GET", KS, 403, 'kustomizations.kustomize.toolkit.fluxcd.io "grpo-exp3" is forbidden', "Forbidden")
    assert main(["gitops-status", "-n", NS]) == 0
    out = capsys.readouterr().out
    assert "cannot get kustomizations.kustomize.toolkit.fluxcd.io in namespace flux-system (forbidden)" in out
    assert "revision not shown" in out and "created by revision" not in out


def test_a_deleted_kustomization_is_one_line(api, capsys):
    cluster(api, [job("grpo-exp3-aaaa1111", "2026-01-01T10:00:00Z")])
    del api.routes[("GET", KS)]
    assert main(["gitops-status", "-n", NS]) == 0
    assert "applied by Flux Kustomization flux-system/grpo-exp3, which no longer exists" in capsys.readouterr().out


def test_status_has_one_gitops_line_and_key_only_for_flux_runs(api, capsys):
    cluster(api, [job("grpo-exp3-aaaa1111", "2026-01-01T10:00:00Z"),
                  job("grpo-exp4-cccc3333", "2026-01-01T11:10:00Z", flux=False, experiment="grpo-exp4")])
    assert main(["status", "grpo-exp3-aaaa1111", "-n", NS]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("gitops:")]
    assert lines == [f"gitops: Flux Kustomization flux-system/grpo-exp3, created by {SHA['a']}; "
                     f"Ready=True ReconciliationSucceeded: Applied revision: {SHA['b']}"]
    assert main(["status", "grpo-exp3-aaaa1111", "-n", NS, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gitops"]["createdByRevision"]["revision"] == SHA["a"] and "line" not in doc["gitops"]
    n = len(api.requests)
    assert main(["status", "grpo-exp4-cccc3333", "-n", NS]) == 0
    assert "gitops:" not in capsys.readouterr().out
    assert not any("fluxcd" in p for _, p, _, _ in api.requests[n:])  # no Flux request for a launcher-submitted run


@pytest.mark.parametrize("argv", [["gitops-status", "-o", "table"], ["gitops-status", "x", "-o", "wide"]])
def test_bad_input_exits_2_without_any_request(api, argv, capsys):
    assert main(argv) == 2
    assert api.requests == []


def test_unknown_name_exits_2(api, capsys):
    cluster(api, [])
    assert main(["gitops-status", "nope", "-n", NS]) == 2
    assert "no run named 'nope'" in capsys.readouterr().err
