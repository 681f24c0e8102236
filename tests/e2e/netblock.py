"""Cut pod-to-pod traffic between the real nodes for a test: an iptables DROP rule in the host's FORWARD chain.

The local cluster has two real nodes (hack/cluster/node.sh), `grpo-node-0` and `grpo-node-1`, each with its
own Linux bridge on this host: grpo0 = 10.244.0.0/24 (node IP 10.244.0.1), grpo1 = 10.244.1.0/24. A pod on
one node reaches a pod on the other through the host's routing, so every such packet traverses the
host's FORWARD chain, and a rule there drops it (pods on the same bridge are only seen there with
`br_netfilter`; a multi-node job's pods are spread one per node by hostname anti-affinity, so this does
not matter for them).

The rule matches only TCP to one destination port between addresses of the pod network (the real
nodes' podCIDRs, 10.244.0.0/16 when they have none), is inserted *first* in FORWARD (before
kube-proxy's and netavark's jumps) and *before* the job is submitted (so no connection slips through
before it exists), and carries a comment naming the test, so the `finally` removes exactly the rule it
added, never anything else.

    with block_port(PYTORCHJOB_MASTER_PORT, tag=f"doctor-e2e-{ns}"):
        ... submit; the worker cannot reach the master's MASTER_PORT: the rendezvous fails ...
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess

import kwok_support as ks

# The training-operator (v1.9) sets MASTER_PORT to the container's `pytorchjob-port`, 23456 when the container
# declares none (the launcher's pods declare none); the smoke workload's gloo rendezvous
# (launcher.entrypoint.smoke.join_pytorchjob_group -> smoke_dist.TorchGroup.join) listens there on rank 0.
PYTORCHJOB_MASTER_PORT = 23456
POD_NETWORK = "10.244.0.0/16"
REAL_NODE_LABEL = "grpo.launcher.io/node-kind=real"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


def real_nodes(info: ks.ClusterInfo) -> list[dict]:
    out = info.kubectl("get", "nodes", "-l", REAL_NODE_LABEL, "-o", "json").stdout
    return json.loads(out)["items"]


def pod_network(info: ks.ClusterInfo | None = None) -> str:
    """The smallest network holding every real node's podCIDR (10.244.0.0/23 for the two /24s), else POD_NETWORK."""
    cidrs = []
    for n in real_nodes(info) if info is not None else []:
        spec = n.get("spec") or {}
        for c in spec.get("podCIDRs") or [spec.get("podCIDR")]:
            if c and ":" not in c:  # IPv4 only: the rule is an iptables (not ip6tables) one
                cidrs.append(ipaddress.ip_network(c, strict=False))
    if not cidrs:
        return POD_NETWORK
    net = cidrs[0]
    while not all(c.subnet_of(net) for c in cidrs):
        net = net.supernet()
    return str(net)


def rule(port: int, tag: str, network: str = POD_NETWORK, dest: str | None = None) -> list[str]:
    """The iptables match of `block_port` (without the chain): TCP to `port` between pod addresses, commented."""
    return ["-s", network, "-d", dest or network, "-p", "tcp", "--dport", str(port),
            "-m", "comment", "--comment", tag, "-j", "DROP"]


@contextlib.contextmanager
def block_port(port: int, *, tag: str, network: str = POD_NETWORK, dest: str | None = None):
    """Drop TCP to `port` (on `dest`, else any pod) between pods of `network` while the block runs."""
    iptables = shutil.which("iptables")
    if iptables is None:
        raise RuntimeError("iptables is not installed on this host")
    forwarding = _run("sysctl", "-n", "net.ipv4.ip_forward", check=False).stdout.strip()
    if forwarding != "1":
        raise RuntimeError("net.ipv4.ip_forward is not 1: the real nodes' pods cannot reach each other at all")
    match = rule(port, tag, network, dest)
    _run(iptables, "-w", "-I", "FORWARD", "1", *match)
    try:
        yield match
    finally:
        # delete every copy this tag added (a retried insert), and only those
        while _run(iptables, "-w", "-C", "FORWARD", *match, check=False).returncode == 0:
            _run(iptables, "-w", "-D", "FORWARD", *match)


def blocked(port: int, tag: str, network: str = POD_NETWORK) -> bool:
    """Whether the rule of `block_port(port, tag=tag, network=network)` is in FORWARD now."""
    return _run("iptables", "-w", "-C", "FORWARD", *rule(port, tag, network), check=False).returncode == 0
