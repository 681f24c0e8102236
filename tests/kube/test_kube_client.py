"""The `Kube` seam with the real kubernetes client against a local fake API server: request shapes,
and one clear line (never a credential) for every failure."""
from __future__ import annotations

import socket
import threading

import pytest

from kube_fakes import FakeApiServer, kubeconfig_for
from launcher.errors import EXIT_CLUSTER, BadInput, ClusterError
from launcher.kube import CONFIGMAP, PYTORCHJOB, ApiError, ClusterTimeout, ClusterUnreachable, Kube

TOKEN = "s3cr3t-token-do-not-print"


@pytest.fixture
def api():
    s = FakeApiServer()
    yield s
    s.close()


@pytest.fixture
def kube(api, tmp_path):
    return Kube.connect(str(api.kubeconfig(tmp_path / "kc", token=TOKEN, namespace="team-a")))


def test_connect_takes_namespace_from_context_and_sends_the_token(api, kube):
    assert kube.namespace == "team-a"
    api.routes[("GET", "/api/v1/namespaces/team-a/configmaps/x")] = (200, {"kind": "ConfigMap", "metadata": {"name": "x"}})
    assert kube.get(CONFIGMAP, "x")["metadata"]["name"] == "x"
    assert kube.get(CONFIGMAP, "missing") is None  # 404 on get means "absent", not an error


def test_create_dry_run_sends_dryrun_all(api, kube):
    path = "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs"
    api.routes[("POST", path)] = (201, lambda q, body: {"echo": q})
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "namespace": "team-a"}}
    assert kube.create(obj, dry_run=True) == {"echo": {"dryRun": "All"}}
    assert kube.create(obj) == {"echo": {}}


def test_pod_log_query(api, kube):
    path = "/api/v1/namespaces/team-a/pods/p/log"
    api.routes[("GET", path)] = (200, {})
    resp = kube.pod_log("p", container="pytorch", follow=True, since_time="2026-01-01T00:00:00Z", previous=True)
    resp.read()
    _, _, q, _ = api.requests[-1]
    assert q == {"container": "pytorch", "follow": "true", "sinceTime": "2026-01-01T00:00:00Z",
                 "timestamps": "true", "previous": "true"}


def test_label_selector_and_delete_propagation(api, kube):
    api.routes[("GET", "/api/v1/namespaces/team-a/configmaps")] = (200, {"items": [{"metadata": {"name": "a"}}]})
    assert kube.list(CONFIGMAP, selector="a=b,c=d") == [{"metadata": {"name": "a"}}]
    assert api.requests[-1][2] == {"labelSelector": "a=b,c=d"}
    api.routes[("DELETE", "/api/v1/namespaces/team-a/configmaps/a")] = (200, {})
    assert kube.delete(CONFIGMAP, "a", propagation="Foreground") is True
    assert b'"propagationPolicy": "Foreground"' in api.requests[-1][3]
    assert kube.delete(CONFIGMAP, "gone") is False


@pytest.mark.parametrize("code,message,expect", [
    (401, "Unauthorized", "refused the credentials (401 Unauthorized)"),
    (403, 'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:a:b" cannot list resource',
     'forbidden (403) to list pytorchjobs: pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:a:b"'),
    (409, 'pytorchjobs.kubeflow.org "j" already exists', 'conflict (409) on create PyTorchJob j'),
    (422, 'PyTorchJob.kubeflow.org "j" is invalid: spec.x: Invalid value', "rejected create PyTorchJob j as invalid (422)"),
    (500, "etcdserver: request timed out", "failed to create PyTorchJob j (500)"),
])
def test_api_errors_are_one_line_cluster_errors_without_credentials(api, kube, code, message, expect):
    path = "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs"
    api.status("POST", path, code, message)
    api.status("GET", path, code, message)
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}}
    with pytest.raises(ApiError) as ei:
        kube.list(PYTORCHJOB) if code == 403 else kube.create(obj)
    text = str(ei.value)
    assert expect in text
    assert "\n" not in text and TOKEN not in text and "Authorization" not in text
    assert ei.value.exit_code == EXIT_CLUSTER and ei.value.status == code


def test_connection_refused_is_fast_and_clear(tmp_path, monkeypatch):
    """Fast by structure, not by a stopwatch: one connection attempt plus the one quick retry (`retries = 1`)."""
    import urllib3.util.connection as connection

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = Kube.connect(str(kubeconfig_for(tmp_path / "kc", f"http://127.0.0.1:{port}")))
    attempts = []
    real = connection.create_connection

    def counted(address, *args, **kwargs):
        attempts.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(connection, "create_connection", counted)
    with pytest.raises(ClusterUnreachable, match=rf"cannot reach the API server at http://127.0.0.1:{port}: connection refused"):
        kube.get(PYTORCHJOB, "x")
    assert attempts == [("127.0.0.1", port)] * 2


def test_server_that_never_answers_times_out(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # accept, read nothing, answer nothing
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        kube = Kube(Kube.connect(str(kubeconfig_for(tmp_path / "kc", f"http://127.0.0.1:{srv.getsockname()[1]}"))).api,
                    "default", timeout=(1.0, 1.0))
        # the server never answers: only the client's own read timeout can end the call (the test's pytest-timeout
        # mark bounds a hang; no wall-clock figure here, a busy machine must not fail it)
        with pytest.raises(ClusterTimeout, match="did not answer in time"):
            kube.get(PYTORCHJOB, "x")
    finally:
        stop.set()
        srv.close()
        for c in held:
            c.close()


def test_unknown_context_and_missing_kubeconfig_are_bad_input(tmp_path, api):
    kc = api.kubeconfig(tmp_path / "kc")
    with pytest.raises(BadInput, match="--context nope: no such context"):
        Kube.connect(str(kc), context="nope")
    with pytest.raises((BadInput, ClusterError)):
        Kube.connect(str(tmp_path / "does-not-exist"))


def test_discovery_tells_whether_a_crd_is_installed(api, kube):
    api.routes[("GET", "/apis/kubeflow.org/v1")] = (200, {"kind": "APIResourceList", "resources": [
        {"name": "pytorchjobs", "kind": "PyTorchJob"}, {"name": "pytorchjobs/status"}]})
    from launcher.kube import RAYJOB

    assert kube.api_group_has(PYTORCHJOB) is True
    assert kube.api_group_has(RAYJOB) is False  # /apis/ray.io/v1 answers 404
