"""A real MLflow tracking server for tests: `mlflow server` from the mlflow package, SQLite backend in a
temporary directory, on a free port of one address (loopback unless a test needs another), stopped by
its own process group at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_S = 180  # two shared cores: the server takes ~30 s to import and migrate its database


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def mlflow_cli() -> str:
    """The `mlflow` console script of this interpreter's environment."""
    exe = Path(sys.executable).with_name("mlflow")
    return str(exe) if exe.exists() else (shutil.which("mlflow") or "mlflow")


@contextmanager
def mlflow_server(root: Path, host: str = "127.0.0.1"):
    """Start `mlflow server` bound to `host` only; yields its URI (http://host:port)."""
    port = free_port(host)
    root.mkdir(parents=True, exist_ok=True)
    log = open(root / "server.log", "wb")
    proc = subprocess.Popen(
        [mlflow_cli(), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts"), "--host", host, "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root,
        env={**os.environ, "MLFLOW_TRACKING_URI": ""})
    uri = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {proc.returncode}: {(root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server not healthy after {START_TIMEOUT_S}s: "
                                   f"{(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own group: uvicorn and its worker
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
