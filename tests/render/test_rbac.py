"""The RBAC the launcher renders: exact, valid, and namespace-scoped where it can be."""

from __future__ import annotations

import yaml

from crd_schema import schema_errors
from launcher.cli.main import main
from launcher.render.rbac import PERMISSIONS, rbac_objects


def test_rbac_objects_validate_and_grant_exactly_the_table():
    objs = rbac_objects("team-a", "ServiceAccount", "bot", subject_namespace="ci")
    assert [o["kind"] for o in objs] == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    for o in objs:
        assert schema_errors(o) == [], o["kind"]
    granted = {(o["kind"] == "ClusterRole", r["apiGroups"][0], r["resources"][0], v) for o in objs if "rules" in o
               for r in o["rules"] for v in r["verbs"]}
    wanted = {(p.cluster_scoped, p.group, p.resource, v) for p in PERMISSIONS for v in p.verbs}
    assert granted == wanted  # namespaced calls in the Role, cluster-wide reads in the ClusterRole
    binding = objs[1]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}]
    # Nothing broader than needed: no wildcards, no secrets; pods are written (and exec'd into) only by
    # `data put`, for its own copy pod, and never patched.
    for o in objs:
        for r in o.get("rules", []):
            assert "*" not in r["verbs"] and "*" not in r["resources"]
            assert r["resources"] != ["secrets"]
            if r["resources"] == ["pods"]:
                assert set(r["verbs"]) <= {"list", "watch", "create", "delete"}
            if r["resources"] == ["pods/exec"]:
                assert set(r["verbs"]) == {"get", "create"}


def test_rbac_verb(capsys):
    assert main(["rbac", "-n", "team-a", "--user", "alice", "--no-cluster-role"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    assert docs[1]["subjects"][0] == {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
    assert main(["rbac", "-n", "Bad_NS", "--user", "x"]) == 2


def test_the_role_is_derived_from_the_call_table_and_grants_nothing_unused():
    from launcher.cli.commands import VERBS
    from launcher.render.rbac import CALLS

    rows = [(c.group, c.resource, c.verb, c.cluster_scoped) for c in CALLS]
    assert len(rows) == len(set(rows))  # one row per call
    assert {(p.group, p.resource, v, p.cluster_scoped) for p in PERMISSIONS for v in p.verbs} == set(rows)
    for c in CALLS:
        assert c.used_by and set(c.used_by) <= set(VERBS), c
    granted = {(g, r, v) for g, r, v, _ in rows}
    # The follower's state comes from watches (launcher.kube.informer) of jobs and pods, nothing else.
    assert {("kubeflow.org", "pytorchjobs", "watch"), ("ray.io", "rayjobs", "watch"), ("", "pods", "watch")} <= granted
    # What the launcher never sends: other watches, raw Jobs (the RayJob submitter's pods are found by
    # label), CRD reads (API discovery tells whether an operator is installed), Ray clusters, writes to pods.
    for never in [("", "events", "watch"), ("", "configmaps", "watch"), ("batch", "jobs", "get"), ("batch", "jobs", "list"),
                  ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
                  ("apiextensions.k8s.io", "customresourcedefinitions", "list"), ("ray.io", "rayclusters", "get"),
                  ("", "pods", "get"), ("", "pods", "patch"), ("", "nodes", "get")]:
        assert never not in granted, never
    # Pod writes and exec serve `data put` (its copy pod) and the follower's watchdog (a stall's incident execs into
    # the run's pods for their stacks; --on-stall restart deletes them): nothing else creates, deletes or execs.
    for c in CALLS:
        if c.resource == "pods/exec" or (c.resource == "pods" and c.verb in ("create", "delete")):
            assert set(c.used_by) <= {"data", "logs", "submit", "watch"}, c
    assert [c.used_by for c in CALLS if c.resource == "pods" and c.verb == "create"] == [("data",)]


def test_explain_lists_every_call_with_its_verbs(capsys):
    from launcher.render.rbac import CALLS

    assert main(["rbac", "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(CALLS)
    assert lines[0].startswith("get kubeflow.org/pytorchjobs (namespace; status, submit")
