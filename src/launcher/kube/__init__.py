"""The one seam over the Kubernetes API (`Kube`) and what the launcher reads from it (`jobs`).

Only this package talks to the API server (ARCHITECTURE.md "Walls"); it never imports verl or the
templates. `client` is the generic REST seam with one-line errors; `jobs` interprets job/pod status
(state, why a pod is stuck) and finds a run's pods by label.
"""

from launcher.kube.client import (
    BATCH_JOB,
    CONFIGMAP,
    EVENT,
    FORBIDDEN,
    JOB_RESOURCES,
    JOBSET,
    NAMESPACE,
    NODE,
    POD,
    PVC,
    PYTORCHJOB,
    RAYJOB,
    TRAININGRUNTIME,
    TRAINJOB,
    ApiError,
    ClusterTimeout,
    ClusterUnreachable,
    Kube,
    Resource,
    WatchExpired,
    WatchStream,
    resource_of,
    unless_forbidden,
)

__all__ = [
    "BATCH_JOB", "CONFIGMAP", "EVENT", "JOB_RESOURCES", "JOBSET", "NAMESPACE", "NODE", "POD", "PVC",
    "PYTORCHJOB", "RAYJOB", "TRAININGRUNTIME", "TRAINJOB", "ApiError", "ClusterTimeout", "ClusterUnreachable", "Kube", "Resource", "WatchExpired",
    "WatchStream", "resource_of", "FORBIDDEN", "unless_forbidden",
]
