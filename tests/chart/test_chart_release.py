"""The chart as a Helm user meets it: as a subchart, in the release namespace, its metadata, `helm test`.

Everything here runs the real helm without a cluster (`helm dependency build`, `helm template`,
`helm lint`); what needs one (the upgrade guard's `lookup`, `helm test` passing and failing, `-n`
installs) is in tests/e2e/test_chart_install.py. The check script of the test pod
(files/check_release.py) is tested here on job and pod objects shaped as the API returns them.
"""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
import yaml

from chart_support import CHART, ROOT, helm, helm_error, helm_objects, require_helm
from launcher.spec.load import load_spec

CONFIG = ROOT / "configs" / "grpo-exp3.yaml"
TEST_KINDS = ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Pod"]


def _job(objects):
    return next(o for o in objects if o["kind"] in ("PyTorchJob", "RayJob", "TrainJob"))


def _hooks(objects):
    return [o for o in objects if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]


# ---------------------------------------------------------------------------------------------------
# Subchart: a parent chart depending on this one through file://, with global values


@pytest.fixture
def parent_chart(tmp_path):
    """A parent chart `platform` with grpo-exp3 as a file:// dependency, built offline by the real helm."""
    require_helm()
    parent = tmp_path / "platform"
    parent.mkdir()
    (parent / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "grpo-exp3", "version": "0.1.0", "repository": f"file://{CHART}",
                          "alias": "training"}],
    }))
    # JSON, not yaml.safe_dump: Go's YAML 1.1 reads an unquoted key `n` as false
    (parent / "values.yaml").write_text(json.dumps({
        "global": {"imageRegistry": "registry.example", "team": "a"},
        "training": {"rollout": {"n": 4}},
    }))
    helm("dependency", "build", str(parent))
    assert (parent / "charts" / "grpo-exp3-0.1.0.tgz").is_file()
    return parent


def test_subchart_renders_with_global_values(parent_chart):
    """Helm copies the parent's `global` into the subchart's values; the closed schema must allow it."""
    out = helm("template", "platform", str(parent_chart), "--namespace", "team-a", "--skip-tests",
               "--set", "global.extra=1").stdout
    objects = [o for o in yaml.safe_load_all(out) if o]
    # the subchart's values (under its alias) reach the spec: the same job as `launcher render --set rollout.n=4`
    spec = load_spec(CONFIG, ["rollout.n=4", "scheduling.namespace=team-a"])
    assert _job(objects)["metadata"]["name"] == spec.job_name
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}
    # the whole install path (schema, templates, NOTES) as a dependency, client side
    notes = helm("install", "platform", str(parent_chart), "--dry-run=client", "--namespace", "team-a",
                 "--render-subchart-notes").stdout
    assert f"running as pytorchjob/{spec.job_name} in namespace team-a" in notes


def test_subchart_still_refuses_unknown_keys(parent_chart):
    """Allowing `global` opens nothing else: a typo under the subchart's key is refused, naming it."""
    proc = helm("template", "platform", str(parent_chart), "--set", "training.rollout.nn=4", check=False)
    assert proc.returncode != 0
    assert "at '/rollout': additional properties 'nn' not allowed" in proc.stderr, proc.stderr


def test_global_values_do_not_change_the_release():
    """`global` is never read: the same objects (and so the same job name and hash) with or without it."""
    assert helm_objects("--set", "global.imageRegistry=r.example", "--set-json", 'global.x={"y": [1]}') == helm_objects()


# ---------------------------------------------------------------------------------------------------
# Namespace: the release namespace by default, an explicit value must agree with it


def test_namespace_defaults_to_the_release_namespace():
    objects = helm_objects(namespace="team-a")
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}
    # the namespace is part of the spec: the chart names the job as `launcher render --set scheduling.namespace=team-a`
    spec = load_spec(CONFIG, ["scheduling.namespace=team-a"])
    assert _job(objects)["metadata"]["name"] == spec.job_name
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    assert json.loads(cm["data"]["spec.yaml"])["scheduling"]["namespace"] == "team-a"
    # an explicit value equal to the release namespace is the same release
    assert helm_objects("--set", "scheduling.namespace=team-a", namespace="team-a") == objects


def test_explicit_namespace_other_than_the_release_is_refused():
    err = helm_error("--set", "scheduling.namespace=team-b", namespace="team-a")
    assert 'values.scheduling.namespace must be null (the release namespace) or equal the release namespace ' \
           '"team-a"' in err and 'got "team-b"' in err, err


def test_notes_name_the_release_namespace():
    require_helm()
    out = helm("install", "grpo-exp3", str(CHART), "--dry-run=client", "--namespace", "team-a").stdout
    notes = out[out.index("NOTES:"):]
    job = _job(helm_objects(namespace="team-a"))["metadata"]["name"]
    assert f"python -m launcher logs -f {job} --namespace team-a" in notes
    assert "helm upgrade" in notes and "refuses" in notes


# ---------------------------------------------------------------------------------------------------
# Chart.yaml


def test_chart_yaml_carries_home_sources_maintainers():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    url = "https://github.com/grpo-launcher/grpo-launcher"
    assert chart["home"] == url and url in chart["sources"]
    assert chart["maintainers"] and all(m.get("name") and m.get("url", "").startswith("https://")
                                        for m in chart["maintainers"])


def test_lint_strict_reports_no_warnings():
    require_helm()
    out = helm("lint", "--strict", str(CHART)).stdout
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


# ---------------------------------------------------------------------------------------------------
# helm test: the hooks rendered


def test_helm_test_hooks_are_only_test_hooks():
    objects = helm_objects(tests=True)
    hooks = _hooks(objects)
    assert sorted(o["kind"] for o in hooks) == sorted(TEST_KINDS)
    # install/upgrade objects are unchanged by the hooks (helm test creates them, nothing else does)
    assert [o for o in objects if o not in hooks] == helm_objects()
    names = {o["metadata"]["name"] for o in hooks}
    assert names == {"grpo-exp3-grpo-exp3-test"}
    for obj in hooks:
        # not a pod of the run: the launcher selects a run's pods by app.kubernetes.io/instance
        assert "app.kubernetes.io/instance" not in obj["metadata"]["labels"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "helm-test"


def test_helm_test_role_only_reads_the_job_and_lists_pods():
    role = next(o for o in helm_objects(tests=True) if o["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get"]},
        {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["get"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]


@pytest.mark.parametrize("backend,nodes,expected", [("pytorchjob", 1, "1"), ("pytorchjob", 2, "2"),
                                                    ("rayjob", 2, "3"), ("trainjob", 1, "1"), ("trainjob", 2, "2")])
def test_helm_test_pod_checks_the_rendered_job(backend, nodes, expected):
    objects = helm_objects("--set", f"backend={backend}", "--set", f"resources.nodes={nodes}", tests=True)
    pod = next(o for o in _hooks(objects) if o["kind"] == "Pod")
    ctr = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in ctr["env"]}
    job = _job(objects)
    assert env["JOB_KIND"] == job["kind"] and env["JOB_NAME"] == job["metadata"]["name"]
    assert env["JOB_NAMESPACE"] == "default" and env["EXPECTED_PODS"] == expected
    assert ctr["image"] == job_image(objects, job) and ctr["command"] == ["python3", "/check/check_release.py"]
    assert pod["spec"]["serviceAccountName"] == "grpo-exp3-grpo-exp3-test"
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True and pod["spec"]["securityContext"]["runAsNonRoot"]
    assert "hostNetwork" not in pod["spec"] and "KUBERNETES_SERVICE_HOST" not in env
    script = next(o for o in _hooks(objects) if o["kind"] == "ConfigMap")["data"]["check_release.py"]
    assert script == (CHART / "files" / "check_release.py").read_text()


def job_image(objects, job):
    if job["kind"] == "TrainJob":  # the pods are the TrainingRuntime's
        runtime = next(o for o in objects if o["kind"] == "TrainingRuntime")
        pods = [r["template"]["spec"]["template"] for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]]
    elif job["kind"] == "PyTorchJob":
        pods = [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    else:
        pods = [job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]]
    return pods[0]["spec"]["containers"][0]["image"]


def test_helm_test_pod_placement_and_api_server_values():
    toleration = {"key": "grpo.launcher.io/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    objects = helm_objects("--set", "helm_test.image=busybox:1", "--set-json",
                           'helm_test.node_selector={"grpo.launcher.io/node-kind": "real"}',
                           "--set-json", f"helm_test.tolerations=[{json.dumps(toleration)}]",
                           "--set", "helm_test.api_server=127.0.0.1:16443", "--set", "helm_test.host_network=true",
                           tests=True)
    pod = next(o for o in _hooks(objects) if o["kind"] == "Pod")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert pod["spec"]["containers"][0]["image"] == "busybox:1"
    assert pod["spec"]["nodeSelector"] == {"grpo.launcher.io/node-kind": "real"}
    assert pod["spec"]["tolerations"] == [toleration] and pod["spec"]["hostNetwork"] is True
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "16443")
    # the job is untouched by test values (they are not part of the spec)
    assert [o for o in objects if o not in _hooks(objects)] == helm_objects()


def test_helm_test_can_be_switched_off():
    assert _hooks(helm_objects("--set", "helm_test.enabled=false", tests=True)) == []


@pytest.mark.parametrize("args,message", [
    (["--set", "helm_test.api_server=https://x"], "at '/helm_test/api_server'"),
    (["--set", "helm_test.timeout_seconds=0"], "at '/helm_test/timeout_seconds': minimum: got 0, want 1"),
    (["--set", "helm_test.nodeSelector.a=b"], "at '/helm_test': additional properties 'nodeSelector' not allowed"),
], ids=["api-server-url", "timeout-0", "camel-case-key"])
def test_helm_test_values_are_checked(args, message):
    err = helm_error(*args)
    assert "values don't meet the specifications of the schema" in err and message in err, err


# ---------------------------------------------------------------------------------------------------
# files/check_release.py on API-shaped objects


@pytest.fixture(scope="module")
def check_release():
    spec = importlib.util.spec_from_file_location("check_release", CHART / "files" / "check_release.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind,job,outcome", [
    ("PyTorchJob", {"status": {"conditions": [{"type": "Created", "status": "True"},
                                              {"type": "Running", "status": "True"}]}}, "active"),
    ("PyTorchJob", {"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Done"}]}}, "succeeded"),
    ("PyTorchJob", {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "OOM"}]}}, "failed"),
    ("PyTorchJob", {"status": {"conditions": [{"type": "Failed", "status": "False"}]}}, "active"),
    ("PyTorchJob", {"spec": {"runPolicy": {"suspend": True}}}, "suspended"),
    ("RayJob", {"status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}}, "active"),
    ("RayJob", {"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}, "succeeded"),
    ("RayJob", {"status": {"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"}}, "failed"),
    ("RayJob", {"spec": {"suspend": True}}, "suspended"),
    # Trainer v2.2's TrainJob conditions (trainjob_types.go: Suspended, Complete, Failed)
    ("TrainJob", {"status": {"jobsStatus": [{"name": "node", "active": 1}]}}, "active"),
    ("TrainJob", {"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "JobsCompleted"}]}},
     "succeeded"),
    ("TrainJob", {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs"}]}}, "failed"),
    ("TrainJob", {"status": {"conditions": [{"type": "Complete", "status": "False"}]}}, "active"),
    ("TrainJob", {"spec": {"suspend": True},
                  "status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended"}]}},
     "suspended"),
    # a TrainJob has no Succeeded condition: the PyTorchJob word must not count as finished for it
    ("TrainJob", {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}, "active"),
], ids=["pt-running", "pt-succeeded", "pt-failed", "pt-failed-false", "pt-suspended", "ray-running",
        "ray-succeeded", "ray-failed", "ray-suspended", "tj-running", "tj-complete", "tj-failed", "tj-complete-false",
        "tj-suspended", "tj-no-succeeded"])
def test_check_job_outcome(check_release, kind, job, outcome):
    assert check_release.job_outcome(kind, job)[0] == outcome


def _pod(name, scheduled, reason=None, message=None):
    cond = {"type": "PodScheduled", "status": "True" if scheduled else "False", "reason": reason, "message": message}
    return {"metadata": {"name": name}, "spec": {"node_name": "n1" if scheduled else None},
            "status": {"phase": "Running" if scheduled else "Pending", "conditions": [cond]}}


def test_check_unscheduled_names_the_pod_and_the_schedulers_reason(check_release):
    assert check_release.unscheduled([_pod("a", True), _pod("b", True)], 2) == []
    problems = check_release.unscheduled(
        [_pod("a", True), _pod("b", False, "Unschedulable", "0/5 nodes are available")], 3)
    assert problems == ["2 of 3 pods exist", "pod b is not scheduled (Unschedulable: 0/5 nodes are available)"]
    fresh = {"metadata": {"name": "c"}, "spec": {}, "status": None}
    assert check_release.unscheduled([fresh], 1) == ["pod c is not scheduled (not yet considered by the scheduler)"]


def test_check_script_is_shipped_in_the_packaged_chart(tmp_path):
    """`helm package` keeps files/ (no .helmignore drops it): the test pod's script travels with the chart."""
    require_helm()
    helm("package", str(CHART), "--destination", str(tmp_path))
    unpacked = tmp_path / "x"
    shutil.unpack_archive(tmp_path / "grpo-exp3-0.1.0.tgz", unpacked)
    assert (unpacked / "grpo-exp3" / "files" / "check_release.py").read_text() == \
        (CHART / "files" / "check_release.py").read_text()
