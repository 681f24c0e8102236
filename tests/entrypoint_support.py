"""Running the real entrypoint in tests: spec files (exp3 with stand-in data, the smoke config), its environment,
free ports, and the `cluster_dir` fixture that kills every Ray process a test started, pass or fail."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def standin_config(tmp: Path, nodes: int = 1) -> Path:
    """exp3 with `nodes`, data/checkpoints/cache under `tmp`; the parquet files exist, so data prep skips."""
    data = tmp / "data"
    data.mkdir(exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"stand-in")
    raw = yaml.safe_load((REPO / "configs" / "grpo-exp3.yaml").read_text())
    raw["resources"]["nodes"] = nodes
    raw["data"]["dir"] = str(data)
    raw["trainer"]["checkpoint_dir"] = str(tmp / "ckpt")
    raw["model"]["cache_dir"] = str(tmp / "hf")
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (32768-60999 here) and above Ray's worker ports
    (10002-19999): a port-0 bind can hand out an ephemeral port that Ray's own components then take by binding
    port 0 before the head binds it (seen: "Failed to bind to address 127.0.0.1:33547 ... in use")."""
    for _ in range(1000):
        port = random.randint(20000, 32000)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # Ray binds the node IP and 127.0.0.1: all addresses must be free
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port in 20000-32000")


def _kill_matching(marker: str) -> None:
    """SIGKILL every process whose command line mentions `marker` (our temp dir): ours only."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def cluster_dir():
    # Short path: Ray's Unix sockets live under the temp dir (108-byte limit).
    path = tempfile.mkdtemp(prefix="gl-ray-", dir="/tmp")
    procs: list[subprocess.Popen] = []
    yield Path(path), procs
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _kill_matching(path)
    time.sleep(0.5)
    _kill_matching(path)
    shutil.rmtree(path, ignore_errors=True)


FIXTURE = REPO / "tests" / "fixtures" / "gsm8k"


IDENTITY_FAILS = (os.getuid(), os.getgid()) != (1000, 1000)


def smoke_config(tmp: Path, *, nodes: int = 1, **smoke) -> Path:
    raw = yaml.safe_load((REPO / "configs" / "smoke-cpu.yaml").read_text())
    raw["resources"]["nodes"] = nodes
    raw["data"] = {"dir": str(tmp / "data"), "source_dir": str(FIXTURE)}
    raw["storage"] = {"mount_path": str(tmp / "ws")}
    raw["model"]["cache_dir"] = str(tmp / "hf")
    raw["trainer"]["checkpoint_dir"] = str(tmp / "ckpt")
    raw["security"] = {"read_only_root_filesystem": False}
    raw["smoke"] = {"steps": 2, "step_seconds": 0.2, "connect_timeout_s": 90, **smoke}
    (tmp / "ws").mkdir(exist_ok=True)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def smoke_env(tmp: Path, rank: int = 0, **extra: str) -> dict:
    home = tmp / f"home{rank}"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "PYTHONPATH": str(REPO / "src"), "HOME": str(home), **extra}


def start_entrypoint(config: Path, env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "launcher.entrypoint", "--config", str(config)], env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
