"""Cut pod-to-pod traffic on the real node for a test: an iptables DROP rule in the host's FORWARD chain.

The real node's pods sit on one Linux bridge with `br_netfilter` loaded (`net.bridge.bridge-nf-call-iptables=1`),
so traffic between two pods on that bridge traverses the host's FORWARD chain and a rule there drops it. The
rule is inserted *before* the job is submitted (so no connection slips through before it exists), matches
only TCP to one destination port between interfaces of that bridge (optionally only to one pod IP), and
carries a comment naming the test, so the `finally` removes exactly the rule it added, never anything else.

    with block_port(23456, bridge=pod_bridge(info), tag=f"doctor-e2e-{ns}"):
        ... submit; the worker cannot reach the master's MASTER_PORT ...
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess

import kwok_support as ks

# The training-operator's MASTER_PORT when the container declares no `pytorchjob-port` (v1.9: 23456).
PYTORCHJOB_MASTER_PORT = 23456
REAL_NODE_LABEL = "grpo.launcher.io/node-kind=real"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


def real_nodes(info: ks.ClusterInfo) -> list[dict]:
    out = info.kubectl("get", "nodes", "-l", REAL_NODE_LABEL, "-o", "json").stdout
    return json.loads(out)["items"]


def pod_bridge(info: ks.ClusterInfo) -> str:
    """The host interface holding an address in the real node's pod CIDR (the CNI bridge)."""
    nodes = real_nodes(info)
    if not nodes:
        raise RuntimeError(f"no node labelled {REAL_NODE_LABEL}")
    cidrs = [ipaddress.ip_network(c, strict=False) for n in nodes
             for c in ((n.get("spec") or {}).get("podCIDRs") or [n["spec"].get("podCIDR")]) if c]
    addrs = json.loads(_run("ip", "-j", "-4", "addr", "show").stdout)
    for link in addrs:
        for a in link.get("addr_info") or []:
            ip = ipaddress.ip_address(a["local"])
            if any(ip in c for c in cidrs):
                return link["ifname"]
    bridges = json.loads(_run("ip", "-j", "link", "show", "type", "bridge").stdout)
    if len(bridges) == 1:
        return bridges[0]["ifname"]
    raise RuntimeError(f"no host interface in the real node's pod CIDR(s) {cidrs}; bridges: "
                       f"{[b['ifname'] for b in bridges]}")


def _rule(port: int, bridge: str, tag: str, dest: str | None) -> list[str]:
    rule = ["-i", bridge, "-o", bridge, "-p", "tcp", "--dport", str(port)]
    if dest:
        rule += ["-d", dest]
    return rule + ["-m", "comment", "--comment", tag, "-j", "DROP"]


@contextlib.contextmanager
def block_port(port: int, *, bridge: str, tag: str, dest: str | None = None):
    """Drop TCP to `port` (on `dest`, else any pod) between pods on `bridge` while the block runs."""
    iptables = shutil.which("iptables")
    if iptables is None:
        raise RuntimeError("iptables is not installed on this host")
    bridged = _run("sysctl", "-n", "net.bridge.bridge-nf-call-iptables", check=False).stdout.strip()
    if bridged != "1":
        raise RuntimeError("net.bridge.bridge-nf-call-iptables is not 1: bridged pod traffic bypasses iptables")
    rule = _rule(port, bridge, tag, dest)
    _run(iptables, "-w", "-I", "FORWARD", "1", *rule)
    try:
        yield rule
    finally:
        # delete every copy this tag added (a retried insert), and only those
        while _run(iptables, "-w", "-C", "FORWARD", *rule, check=False).returncode == 0:
            _run(iptables, "-w", "-D", "FORWARD", *rule)
