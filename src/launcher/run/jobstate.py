"""Where a follower learns job and pod status (a `StateSource`): the shared watches (`WatchState`, the
default) or a GET and LIST per look (`PollState`, `LAUNCHER_FOLLOW_STATE=poll`).
"""

from __future__ import annotations

import threading
import time


from launcher.kube import jobs as J
from launcher.kube.client import POD, ClusterTimeout, Kube

class PollState:
    """The job GET and the pod LISTs, every time the follower looks (the launcher's way before watches)."""

    def __init__(self, kube: Kube):
        self.kube = kube

    def read(self, ref: J.JobRef) -> tuple[dict | None, list[dict]]:
        """(the job object or None when deleted, the run's pods); raises ClusterError when the server fails."""
        obj = self.kube.get(ref.resource, ref.name)
        if obj is not None:  # its status names the RayCluster, whose pods we select by label
            ref = J.JobRef(ref.backend, ref.name, obj)
        return obj, J.job_pods(self.kube, ref)

    def wait(self, timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        pass


class WatchState:
    """Job and pod status from the process's shared watches (`ClusterStateCache`): reading costs no request.

    The launcher's jobs of the run's kind and all of its pods are watched by `app.kubernetes.io/part-of`
    (one watch each for every run followed here); the run's own pods are picked from them client-side with
    the same selectors `job_pods` sends. While a watch cannot be (re)opened, `read` raises its error, as a
    failed poll did, so the follower's outage handling is the same."""

    def __init__(self, kube: Kube, ref: J.JobRef, cache=None, sync_timeout: float = 30.0):
        from launcher.spec import names as L
        from launcher.kube.informer import ClusterStateCache

        self.cache = cache or ClusterStateCache.shared(kube)
        self.sync_timeout = sync_timeout
        self.woken = threading.Event()
        self.jobs = self.cache.subscribe(ref.resource, L.OWNED_SELECTOR)
        self.pods = self.cache.subscribe(POD, L.OWNED_SELECTOR)
        for inf in (self.jobs, self.pods):
            inf.add_listener(self.woken.set)

    def read(self, ref: J.JobRef) -> tuple[dict | None, list[dict]]:
        for inf in (self.jobs, self.pods):
            if inf.fatal is not None:
                raise inf.fatal
            if not inf.wait_synced(self.sync_timeout):
                raise inf.error or ClusterTimeout(f"the API server at {inf.kube.server} did not answer the first "
                                                  f"list of {inf.resource.plural} in {self.sync_timeout:g} s")
            if inf.failing_since is not None and inf.error is not None:
                raise inf.error
        obj = next((o for o in self.jobs.snapshot() if (o.get("metadata") or {}).get("name") == ref.name), None)
        if obj is None:
            # Not in the cache is not "deleted": a shared watch that synced before this job was created (a
            # sweep's next run, a job another process just submitted) delivers it a moment later. Ask once more.
            obj = self.jobs.kube.get(ref.resource, ref.name)
        if obj is not None:
            ref = J.JobRef(ref.backend, ref.name, obj)
        return obj, J.select_pods(ref, self.pods.snapshot())

    def wait(self, timeout: float) -> None:
        """Until a watched object changes (or `timeout`: the follower also checks its own deadline and threads)."""
        self.woken.wait(timeout)
        self.woken.clear()

    def close(self) -> None:
        for inf in (self.jobs, self.pods):
            inf.remove_listener(self.woken.set)
            self.cache.unsubscribe(inf)


def state_source(kube: Kube, ref: J.JobRef, cache=None):
    """`WatchState` unless `LAUNCHER_FOLLOW_STATE=poll` (or `kube` cannot watch): then `PollState`."""
    import os

    mode = os.environ.get("LAUNCHER_FOLLOW_STATE", "watch").strip().lower()
    if mode not in ("watch", "poll"):
        from launcher.errors import BadInput

        raise BadInput(f"LAUNCHER_FOLLOW_STATE: expected 'watch' or 'poll', got {mode!r}")
    if mode == "poll" or not hasattr(kube, "watch"):
        return PollState(kube)
    return WatchState(kube, ref, cache)
