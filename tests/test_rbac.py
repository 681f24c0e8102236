"""The RBAC the launcher renders: exact, valid, and namespace-scoped where it can be."""

from __future__ import annotations

import yaml

from crd_schema import schema_errors
from launcher.cli import main
from launcher.rbac import PERMISSIONS, rbac_objects


def test_rbac_objects_validate_and_grant_exactly_the_table():
    objs = rbac_objects("team-a", "ServiceAccount", "bot", subject_namespace="ci")
    assert [o["kind"] for o in objs] == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    for o in objs:
        assert schema_errors(o) == [], o["kind"]
    granted = {(r["apiGroups"][0], r["resources"][0], v) for o in objs if "rules" in o for r in o["rules"]
               for v in r["verbs"]}
    wanted = {(p.group, p.resource, v) for p in PERMISSIONS for v in p.verbs}
    assert granted == wanted
    role, binding = objs[0], objs[1]
    assert all(not p.cluster_scoped for p in PERMISSIONS
               if any(r["resources"] == [p.resource] for r in role["rules"]))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}]
    # Nothing broader than needed: no wildcards, no secrets, no write on pods.
    for o in objs:
        for r in o.get("rules", []):
            assert "*" not in r["verbs"] and "*" not in r["resources"]
            assert r["resources"] != ["secrets"]
            if r["resources"] == ["pods"]:
                assert set(r["verbs"]) <= {"get", "list", "watch"}


def test_rbac_verb(capsys):
    assert main(["rbac", "-n", "team-a", "--user", "alice", "--no-cluster-role"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    assert docs[1]["subjects"][0] == {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
    assert main(["rbac", "-n", "Bad_NS", "--user", "x"]) == 2
