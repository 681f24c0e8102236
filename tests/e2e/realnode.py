"""Helpers for end-to-end tests on the local cluster's real node (hack/cluster/node.sh): real containers.

The real node `grpo-node-0` runs a real kubelet with containerd; pods meant for it select
`grpo.launcher.io/node-kind: real` and tolerate its taint (configs/smoke-cpu.yaml does both). Tests that
need it fail, never skip, when it is missing: `ensure_real_node` starts it (idempotent) or says why not.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import kwok_support as ks

NODE = "grpo-node-0"
CPU_IMAGE = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
SMOKE = str(ks.REPO_ROOT / "configs" / "smoke-cpu.yaml")


NODES = ("grpo-node-0", "grpo-node-1")


def containerd_socket(node: str = NODE) -> Path:
    return ks.cluster_dir() / "nodes" / node.rsplit("-", 1)[-1] / "containerd.sock"


def ctr(*args: str, node: str = NODE, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    """`ctr` against one real node's containerd, namespace k8s.io (the CRI's)."""
    return subprocess.run(["ctr", "--address", str(containerd_socket(node)), "-n", "k8s.io", *args],
                          capture_output=True, text=True, check=check, timeout=timeout)


def ensure_real_node(info: ks.ClusterInfo, image: bool = True) -> None:
    """Start the real node if needed (up.sh with GRPO_REAL_NODE=1) and check it can run the launcher's image."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["GRPO_REAL_NODE"] = "1"
    proc = subprocess.run([str(ks.HACK_CLUSTER / "up.sh")], capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"the real node could not be started (hack/cluster/up.sh, GRPO_REAL_NODE=1):\n"
                           f"{proc.stderr[-3000:]}")
    for name in NODES:
        node = json.loads(info.kubectl("get", "node", name, "-o", "json").stdout)
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        if not ready or ready[0]["status"] != "True":
            raise RuntimeError(f"node {name} is not Ready: {ready}")
        if image and CPU_IMAGE not in ctr("images", "ls", "-q", node=name).stdout.split():
            raise RuntimeError(f"{CPU_IMAGE} is not in {name}'s containerd (make image-cpu; up.sh imports it)")


def pods(info: ks.ClusterInfo, ns: str, selector: str = "") -> list[dict]:
    args = ["-n", ns, "get", "pods", "-o", "json"] + (["-l", selector] if selector else [])
    return json.loads(info.kubectl(*args).stdout)["items"]


def container_id(pod: dict, name: str = "pytorch") -> str | None:
    for st in pod.get("status", {}).get("containerStatuses") or []:
        if st["name"] == name and st.get("containerID"):
            return st["containerID"].split("://", 1)[-1]
    return None


def kill_container(pod: dict, name: str = "pytorch", signal: str = "SIGKILL") -> None:
    """Kill a running container's process from the host, as a crash or the OOM killer would."""
    cid = container_id(pod, name)
    assert cid, f"no container id for {name} in {pod['metadata']['name']}"
    ctr("tasks", "kill", "-s", signal, cid, node=pod["spec"]["nodeName"])


def wait_pod(info: ks.ClusterInfo, ns: str, pred, timeout: float, what: str, selector: str = "") -> dict:
    """Poll the namespace's pods until pred(pod) holds for one of them; return it."""
    deadline = time.monotonic() + timeout
    last: list[dict] = []
    while time.monotonic() < deadline:
        last = pods(info, ns, selector)
        for p in last:
            if pred(p):
                return p
        time.sleep(0.5)
    states = {p["metadata"]["name"]: p.get("status", {}).get("containerStatuses") for p in last}
    raise TimeoutError(f"{ks.hang_guard(what, timeout)}; pods: {json.dumps(states)[:2000]}")


def running(name: str = "pytorch"):
    def pred(pod: dict) -> bool:
        return any(st["name"] == name and "running" in (st.get("state") or {})
                   for st in pod.get("status", {}).get("containerStatuses") or [])
    return pred


def bridge_address(dev: str = "grpo0") -> str:
    """The host's address on the first real node's bridge (10.244.0.1): a server bound there is reachable from pods on
    either node (a pod reaches the host only at a bridge gateway, and the host delivers a packet for any of its own
    addresses), where loopback is not."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", dev], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    assert m, f"no IPv4 address on {dev}: {out!r} (is the real node up? hack/cluster/node.sh)"
    return m.group(1)
