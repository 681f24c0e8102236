"""Kueue's API as the cluster serves it: which version to speak, and its resources at that version.

Kueue serves `kueue.x-k8s.io/v1beta2` since 0.15 and deprecated `v1beta1` in 0.16; a cluster may
serve either or both. The launcher asks API discovery (`GET /apis/kueue.x-k8s.io/<v>`) and uses the
first of `VERSIONS` that serves LocalQueues, so it never hard-codes one and never reads CRDs.
"""

from __future__ import annotations

from launcher.kube.client import Resource

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # preferred first: v1beta2 since Kueue 0.15, v1beta1 deprecated in 0.16


def served_version(kube) -> str | None:
    """The Kueue API version to use (v1beta2 first, v1beta1 where only that is served); None: not installed."""
    for version in VERSIONS:
        names = kube.api_resources(GROUP, version)
        if names and "localqueues" in names:
            return version
    return None


def localqueue(version: str) -> Resource:
    return Resource("LocalQueue", GROUP, version, "localqueues")


def clusterqueue(version: str) -> Resource:
    return Resource("ClusterQueue", GROUP, version, "clusterqueues", namespaced=False)


def workload(version: str) -> Resource:
    return Resource("Workload", GROUP, version, "workloads")
