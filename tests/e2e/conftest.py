"""Fixtures for end-to-end tests against the real local control plane (hack/cluster, `make cluster-up`).

- ``kube_cluster`` (session): reuses the running cluster that hack/cluster/up.sh started (marker file + ConfigMap
  kube-system/grpo-launcher-cluster with the same id), or starts one. It never uses KUBECONFIG or ~/.kube/config,
  so it cannot touch a cluster it did not start. It is left running (later sessions reuse it).
- ``kube_api``: a kubernetes ApiClient bound to that cluster's kubeconfig.
- ``tools_bin``: directory with the cached kubectl and helm; also exported as env GRPO_TOOLS_BIN.
- ``namespace`` (function): a fresh namespace per test, deleted afterwards (jobs first, so finalizers run).
- ``trainer`` / ``flux`` (session): the cluster with Kubeflow Trainer v2 + JobSet / Flux and its git server running
  (up.sh with GRPO_TRAINER=1 / GRPO_FLUX=1: started when not running, a failure when not built, never a skip).

Run on several pytest-xdist workers (`make test-cluster-shared`: `-n E2E_WORKERS --dist loadfile`), the tests share
the one control plane: each test has its own namespace, the fake nodes a test adds carry its own taint, a run sent
through Kueue outside test_kueue_e2e.py uses a ClusterQueue of its own (kueue_support), and hack/cluster/up.sh
serialises concurrent starts with a lock. tests/conftest.py's scheduler keeps what must not interleave on one
worker: each module whole (module fixtures, in-file order) and the `realnode` tests on two workers, the real verl
runs one after another on one and the `smallpods` tests on the other, beside them; `real_nodes_shared` keeps apart
what the kube-scheduler does not (tests/e2e/realnode_share.py). The API-server restart test takes the control plane
down: `make test-cluster` runs it alone, after the others.
"""
from __future__ import annotations

import os
import subprocess
import uuid

import pytest

import kwok_support as ks
import real_run_ledger
import realnode_share


@pytest.fixture(autouse=True)
def real_nodes_shared(request):
    """A `wholenodes` test has both real nodes to itself; a `smallpods` test shares them with one-node verl runs
    (tests/e2e/realnode_share.py). Autouse, so it is set up before and torn down after the test's namespace."""
    if request.node.get_closest_marker("wholenodes"):
        with realnode_share.whole_nodes():
            yield
    elif request.node.get_closest_marker("smallpods"):
        with realnode_share.small_pods():
            yield
    else:
        yield


@pytest.fixture(scope="session")
def kube_cluster() -> ks.ClusterInfo:
    info = ks.ensure_cluster()
    os.environ["GRPO_TOOLS_BIN"] = str(info.tools_bin)
    return info


def _up_with(flag: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env[flag] = "1"
    proc = subprocess.run([str(ks.HACK_CLUSTER / "up.sh")], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"hack/cluster/up.sh with {flag}=1 failed:\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="session")
def trainer(kube_cluster: ks.ClusterInfo) -> ks.ClusterInfo:
    _up_with("GRPO_TRAINER")
    return kube_cluster


@pytest.fixture(scope="session")
def flux(kube_cluster: ks.ClusterInfo) -> ks.ClusterInfo:
    _up_with("GRPO_FLUX")
    return kube_cluster


@pytest.fixture(scope="session")
def tools_bin(kube_cluster: ks.ClusterInfo):
    return kube_cluster.tools_bin


@pytest.fixture(scope="session")
def kube_api(kube_cluster: ks.ClusterInfo):
    return kube_cluster.api_client()


def _delete_jobs(api, ns: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    co = client.CustomObjectsApi(api)
    for group, version, plural in (("ray.io", "v1", "rayjobs"), ("kubeflow.org", "v1", "pytorchjobs"),
                                   ("ray.io", "v1", "rayclusters"), ("trainer.kubeflow.org", "v1alpha1", "trainjobs")):
        try:
            items = co.list_namespaced_custom_object(group, version, ns, plural)["items"]
        except ApiException:
            continue
        for it in items:
            try:
                co.delete_namespaced_custom_object(group, version, ns, plural, it["metadata"]["name"],
                                                   propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise
        # wait for the operators to drop their finalizers
        try:
            ks.wait_for(lambda: not co.list_namespaced_custom_object(group, version, ns, plural)["items"],
                        timeout=60, what=f"{plural} in {ns} to be deleted")
        except TimeoutError:
            for it in co.list_namespaced_custom_object(group, version, ns, plural)["items"]:
                co.patch_namespaced_custom_object(group, version, ns, plural, it["metadata"]["name"],
                                                  {"metadata": {"finalizers": None}})


@pytest.fixture
def namespace(kube_cluster: ks.ClusterInfo, kube_api, request):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube_api)
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    ns = f"e2e-{base}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=ns, labels={ks.E2E_NAMESPACE_LABEL: ns})))
    # the ServiceAccount admission plugin rejects pods until kube-controller-manager created `default`
    ks.wait_for(lambda: core.read_namespaced_service_account("default", ns), timeout=60,
                what=f"serviceaccount default in {ns}")
    yield ns
    try:  # before the jobs go: their pods' logs say which were real verl runs (tests/real_run_ledger.py)
        # ...and those the test deleted, from their run directories (the test's tmp_path, where the tests keep them)
        saved = request.node.funcargs.get("tmp_path")
        real_run_ledger.record(kube_api, ns, request.node.nodeid, saved_under=saved)
    except Exception as exc:  # the ledger reports; it must not fail the test it follows
        print(f"real-run ledger: {ns} not recorded: {exc}")
    _delete_jobs(kube_api, ns)
    co = client.CustomObjectsApi(kube_api)
    try:
        co.delete_collection_cluster_custom_object(ks.KWOK_GROUP, ks.KWOK_VERSION, "clusterlogs",
                                                   label_selector=f"{ks.E2E_NAMESPACE_LABEL}={ns}")
    except ApiException:
        pass
    try:
        core.delete_namespace(ns)
    except ApiException as e:
        if e.status != 404:
            raise
