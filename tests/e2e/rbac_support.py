"""ServiceAccounts bound to the launcher's rendered RBAC, and kubeconfigs that use their tokens."""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

import kwok_support as ks
from launcher_helpers import PY, REPO


def launcher_rbac(ns: str, sa: str) -> list[dict]:
    """The objects `launcher rbac` renders for ServiceAccount `ns:sa`."""
    out = subprocess.run([PY, "-m", "launcher", "rbac", "-n", ns, "--serviceaccount", f"{ns}:{sa}",
                          "--name", f"launcher-{ns}"], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO / "src")})
    return list(yaml.safe_load_all(out.stdout))


def apply(info: ks.ClusterInfo, objs: list[dict]) -> None:
    info.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))


def launcher_user(info: ks.ClusterInfo, ns: str, sa: str, path: Path) -> tuple[ks.ClusterInfo, list[dict], str]:
    """Create `sa`, bind it to the launcher's Role; return (its cluster view, the RBAC objects, its token)."""
    info.kubectl("create", "serviceaccount", sa, "-n", ns)
    objs = launcher_rbac(ns, sa)
    apply(info, objs)
    admin = yaml.safe_load(Path(info.kubeconfig).read_text())
    token = info.kubectl("create", "token", sa, "-n", ns, "--duration", "1h").stdout.strip()
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": cluster["name"], "user": sa, "namespace": ns}}],
        "current-context": sa,
    }))
    return ks.ClusterInfo(**{**info.__dict__, "kubeconfig": path}), objs, token
