"""`Kube.connect` and `Kube.request` beyond the happy path: in-cluster namespace, the client's own log
lines kept off stderr (a failing exec plugin, urllib3 retry warnings), and a programming error that
must surface as a bug, never as "the cluster is unreachable"."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kube_fakes import FakeApiServer, kubeconfig_for
from launcher.errors import ClusterError
from launcher.kube import CONFIGMAP, ClusterUnreachable, Kube

import launcher

SRC = Path(launcher.__file__).resolve().parents[1]  # the launcher under test, also in the subprocesses


@pytest.fixture
def api():
    s = FakeApiServer()
    yield s
    s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serviceaccount(tmp_path: Path, namespace: str | None = "team-sa") -> Path:
    d = tmp_path / "sa"
    d.mkdir()
    (d / "token").write_text("sa-token")
    (d / "ca.crt").write_text("not read until a TLS connection is made")
    if namespace is not None:
        (d / "namespace").write_text(namespace + "\n")
    return d


@pytest.fixture
def in_cluster(monkeypatch, tmp_path):
    """No kubeconfig anywhere, and the environment a pod gets."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def test_in_cluster_namespace_is_the_service_accounts(in_cluster, tmp_path, monkeypatch):
    from launcher.kube.client import _auth_headers

    kube = Kube.connect(serviceaccount_dir=serviceaccount(tmp_path))
    assert kube.namespace == "team-sa" and kube.server == "https://10.96.0.1:443"
    assert _auth_headers(kube.api.configuration) == {"authorization": "bearer sa-token"}  # the loader writes it lower-case
    assert Kube.connect(namespace="explicit", serviceaccount_dir=tmp_path / "sa").namespace == "explicit"
    monkeypatch.setenv("POD_NAMESPACE", "from-env")  # client-go reads it before the file
    assert Kube.connect(serviceaccount_dir=tmp_path / "sa").namespace == "from-env"


def test_in_cluster_without_namespace_file_is_default(in_cluster, tmp_path):
    assert Kube.connect(serviceaccount_dir=serviceaccount(tmp_path, None)).namespace == "default"


def test_a_kubeconfig_context_namespace_still_wins_over_in_cluster(in_cluster, api, tmp_path):
    kc = api.kubeconfig(tmp_path / "kc", namespace="team-kc")
    assert Kube.connect(str(kc), serviceaccount_dir=serviceaccount(tmp_path)).namespace == "team-kc"


def exec_kubeconfig(path: Path, server: str, script: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "sso", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
            "args": ["-c", script], "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sso"}}],
    }))
    return path


FAILING_PLUGIN = "import sys; sys.stderr.write('token expired: run sso-login\\n'); sys.exit(1)"


def test_failing_exec_plugin_is_one_clear_error(api, tmp_path):
    kc = exec_kubeconfig(tmp_path / "kc", api.url, FAILING_PLUGIN)
    with pytest.raises(ClusterError) as ei:
        Kube.connect(str(kc))
    text = str(ei.value)
    assert text.startswith("cannot get credentials for kubeconfig user sso: exec: process returned 1")
    assert "token expired: run sso-login" in text and "\n" not in text
    assert api.requests == []  # nothing was sent without credentials


def launcher_cli(args: list[str], kubeconfig: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig),
           "PYTHONPATH": str(SRC), "LAUNCHER_RUNS_DIR": str(tmp_path / "runs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_cli_failing_exec_plugin_prints_only_the_launchers_line(api, tmp_path):
    p = launcher_cli(["list"], exec_kubeconfig(tmp_path / "kc", api.url, FAILING_PLUGIN), tmp_path)
    assert p.returncode == 3
    assert p.stderr.splitlines() == [
        "error: cannot get credentials for kubeconfig user sso: exec: process returned 1. "
        "token expired: run sso-login"], p.stderr


def test_cli_unreachable_server_prints_no_urllib3_retry_warning(tmp_path):
    port = free_port()
    p = launcher_cli(["list"], kubeconfig_for(tmp_path / "kc", f"http://127.0.0.1:{port}"), tmp_path)
    assert p.returncode == 3
    # urllib3 logs "Retrying (Retry(total=0, ...)) after connection broken by ..." before its one retry
    assert p.stderr.splitlines() == [
        f"error: cannot reach the API server at http://127.0.0.1:{port}: connection refused"], p.stderr


def test_a_programming_error_is_not_reported_as_an_unreachable_cluster(api, tmp_path):
    """A client method the installed kubernetes lacks (kubernetes<37 had no `param_serialize`) is a bug."""
    kube = Kube.connect(str(api.kubeconfig(tmp_path / "kc")))

    class Broken:
        def request(self, *a, **kw):
            raise AttributeError("'ApiClient' object has no attribute 'param_serialize'")

    kube.api.rest_client.pool_manager = Broken()
    with pytest.raises(AttributeError, match="param_serialize"):
        kube.get(CONFIGMAP, "x")


def test_transport_errors_still_read_as_unreachable(api, tmp_path):
    kube = Kube.connect(str(api.kubeconfig(tmp_path / "kc")))

    class Down:
        def request(self, *a, **kw):
            raise ConnectionResetError(104, "Connection reset by peer")

    kube.api.rest_client.pool_manager = Down()
    with pytest.raises(ClusterUnreachable, match="cannot reach the API server at .*Connection reset by peer"):
        kube.get(CONFIGMAP, "x")


def test_client_log_records_never_reach_a_configured_root_logger(api, tmp_path):
    """Even where logging is configured (a handler on the root logger, as `logging.basicConfig` adds),
    urllib3's retry warnings and the kubeconfig loader's root-logger errors stay with the launcher."""
    import logging

    class Collect(logging.Handler):  # not caplog: pytest also attaches it to loggers that do not propagate
        records: list = []

        def emit(self, record):
            self.records.append(record)

    root, handler = logging.getLogger(), Collect(logging.DEBUG)
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        down = Kube.connect(str(kubeconfig_for(tmp_path / "kc1", f"http://127.0.0.1:{free_port()}")))
        with pytest.raises(ClusterUnreachable):
            down.get(CONFIGMAP, "x")  # one retry (cfg.retries = 1): urllib3 warns "Retrying (...)"
        assert [r.name for r in handler.records if r.levelno >= logging.WARNING] == []
        with pytest.raises(ClusterError):
            Kube.connect(str(exec_kubeconfig(tmp_path / "kc2", api.url, FAILING_PLUGIN)))
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    leaked = [(r.name, r.getMessage()) for r in handler.records if r.levelno >= logging.WARNING]
    assert leaked == []
