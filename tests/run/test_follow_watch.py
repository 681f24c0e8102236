"""The watch-based state source: informers (list, watch from resourceVersion, re-list on 410 Gone), one watch per
kind shared by every run followed in a process, and the follower through a watch that expires mid-run."""
from __future__ import annotations

import threading
import time

import pytest

from kube_fakes import FakeApiServer, FakeKube, kubeconfig_for, pod, pytorchjob
import simlog
from launcher.run.follow import LogFollower
from launcher.run.jobstate import PollState, WatchState, state_source
from launcher.kube import POD, PYTORCHJOB, ApiError, Kube, WatchExpired
from launcher.kube import jobs as J
from launcher.kube.informer import ClusterStateCache, Informer
from launcher.run.dirs import RunDir
from follow_support import raw, rows, wait_until

OWNED = "app.kubernetes.io/part-of=grpo-launcher"


def lines_of(steps, seed=0):
    return [ln.rstrip("\n") for ln in simlog.generate(steps=steps, seed=seed)]


def names(inf: Informer) -> set[str]:
    return {o["metadata"]["name"] for o in inf.snapshot()}


def test_informer_lists_then_applies_watch_events():
    fk = FakeKube()
    fk.put(pod("a", "j"))
    inf = Informer(fk, POD, OWNED).start()
    try:
        assert inf.wait_synced(5) and names(inf) == {"a"}
        fk.put(pod("b", "j"))
        assert wait_until(lambda: names(inf) == {"a", "b"})
        fk.delete(POD, "a")
        assert wait_until(lambda: names(inf) == {"b"})
        fk.put(pod("other", "j", labels={"app.kubernetes.io/instance": "j"}))  # not the launcher's: not watched
        fk.put(pod("b", "j", restart=2))
        assert wait_until(lambda: J.container_status(inf.snapshot()[0], "pytorch").get("restartCount") == 2)
        assert names(inf) == {"b"}
        assert inf.lists == 1 and inf.expired == 0
    finally:
        inf.stop()


def test_informer_resumes_from_last_version_after_the_watch_ends():
    """A watch the server ends (timeoutSeconds, a restart) is re-opened from the last version: nothing re-listed,
    and a change made while it was re-opening is not missed."""
    fk = FakeKube()
    fk.put(pod("a", "j"))
    inf = Informer(fk, POD, OWNED, backoff=(0.05, 0.1)).start()
    try:
        assert inf.wait_synced(5)
        assert wait_until(lambda: fk.open_watches)
        with fk.cond:
            for w in fk.open_watches:
                w.close()
            fk.open_watches.clear()
            fk.put(pod("b", "j"))  # while no watch is open
        assert wait_until(lambda: names(inf) == {"a", "b"})
        assert inf.lists == 1 and inf.watches >= 2 and inf.expired == 0
    finally:
        inf.stop()


def test_informer_relists_on_410_gone_and_drops_what_was_deleted_meanwhile():
    fk = FakeKube()
    fk.put(pod("a", "j"))
    fk.put(pod("b", "j"))
    inf = Informer(fk, POD, OWNED).start()
    try:
        assert inf.wait_synced(5) and wait_until(lambda: fk.open_watches)

        def meanwhile():
            fk.delete(POD, "a")  # the DELETED event is compacted away: only a new list can tell
            fk.put(pod("c", "j"))

        fk.expire_watches(meanwhile)
        assert wait_until(lambda: names(inf) == {"b", "c"})
        assert inf.expired == 1 and inf.lists == 2
        fk.put(pod("d", "j"))  # and the watch goes on from the new list's version
        assert wait_until(lambda: names(inf) == {"b", "c", "d"})
    finally:
        inf.stop()


def test_informer_stops_on_a_refused_watch_and_readers_see_the_error():
    fk = FakeKube()
    fk.put(pytorchjob("j"))

    def forbidden(*a, **k):
        raise ApiError(403, "pods is forbidden", "watch pods", fk.server)

    fk.watch = forbidden
    inf = Informer(fk, PYTORCHJOB, OWNED).start()
    try:
        assert wait_until(lambda: inf.fatal is not None)
        assert inf.fatal.status == 403
        state = WatchState(fk, J.JobRef("pytorchjob", "j", {}), cache=_cache_with(fk, inf))
        with pytest.raises(ApiError, match="forbidden"):
            state.read(J.JobRef("pytorchjob", "j", {}))
    finally:
        inf.stop()


def _cache_with(fk, inf):
    cache = ClusterStateCache(fk)
    cache._informers[(fk.namespace, inf.resource.path(), inf.selector)] = (inf, 1)
    cache._informers[(fk.namespace, POD.path(), OWNED)] = (inf, 1)
    return cache


def test_one_watch_per_kind_serves_every_run_in_the_process():
    """Ten runs followed through one cache: two informers (jobs, pods), each picking its own run's pods; the
    informers stop when the last follower leaves."""
    fk = FakeKube()
    cache = ClusterStateCache(fk)
    states = []
    for i in range(10):
        job = f"exp-{i:08d}"
        fk.put(pytorchjob(job))
        fk.put(pod(f"{job}-master-0", job))
    for i in range(10):
        job = f"exp-{i:08d}"
        states.append((job, WatchState(fk, J.JobRef("pytorchjob", job, {}), cache=cache)))
    assert len(cache.informers()) == 2
    for job, st in states:
        obj, pods = st.read(J.JobRef("pytorchjob", job, {}))
        assert obj["metadata"]["name"] == job and [p["metadata"]["name"] for p in pods] == [f"{job}-master-0"]
    assert sorted(r.split()[0] for r in fk.requests) == ["listrv", "listrv", "watch", "watch"]
    for _, st in states:
        st.close()
    assert cache.informers() == []


def test_state_source_picks_watch_by_default_and_poll_on_request(monkeypatch):
    fk = FakeKube()
    fk.put(pytorchjob("j"))
    ref = J.JobRef("pytorchjob", "j", {})
    src = state_source(fk, ref)
    try:
        assert isinstance(src, WatchState)
    finally:
        src.close()
    monkeypatch.setenv("LAUNCHER_FOLLOW_STATE", "poll")
    assert isinstance(state_source(fk, ref), PollState)
    monkeypatch.setenv("LAUNCHER_FOLLOW_STATE", "sometimes")
    from launcher.errors import BadInput

    with pytest.raises(BadInput, match="LAUNCHER_FOLLOW_STATE: expected 'watch' or 'poll', got 'sometimes'"):
        state_source(fk, ref)


def test_watch_expires_mid_run_follower_relists_and_loses_or_duplicates_nothing(tmp_path):
    """410 Gone mid-run, while the container restarts unseen: the follower re-lists, finds the restart, reads
    the previous container's log and the new one; raw log and metrics hold every line exactly once. In steady
    state the follower sends no job GET or pod LIST at all: only its log streams."""
    JOB = "exp-12345678"
    POD_ = f"{JOB}-master-0"
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD_, JOB))
    first, second = lines_of(4, seed=1), lines_of(6, seed=2)
    fk.append(POD_, "pytorch", 0, first[:8])
    cache = ClusterStateCache(fk)
    run_dir = RunDir(tmp_path / JOB)
    f = LogFollower(fk, J.JobRef("pytorchjob", JOB, fk.get(PYTORCHJOB, JOB)), run_dir, poll_interval=0.05,
                    read_timeout=2, state=None)
    state = WatchState(fk, f.ref, cache=cache)
    f._state_arg = state
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("result", f.run()), daemon=True)
    t.start()
    assert wait_until(lambda: len(raw(run_dir, POD_)) == 8 if run_dir.pod_log(POD_).exists() else False)
    fk.append(POD_, "pytorch", 0, first[8:])
    before = list(fk.requests)
    time.sleep(0.5)  # steady state: ten loop turns at poll_interval 0.05
    assert [r for r in fk.requests[len(before):] if r.startswith(("get", "list"))] == []

    def restart():  # the container exits and restarts while no watch is open; its events are compacted away
        fk.put(pod(POD_, JOB, restart=1))
        fk.append(POD_, "pytorch", 1, second)

    fk.expire_watches(restart)
    assert wait_until(lambda: state.pods.expired >= 1 and state.pods.lists >= 2)
    assert wait_until(lambda: len(raw(run_dir, POD_)) == len(first) + len(second))
    fk.put(pod(POD_, JOB, phase="Succeeded", state="terminated", restart=1))
    fk.put(pytorchjob(JOB, conditions=(("Succeeded", "True"),)))
    t.join(15)
    state.close()
    assert out["result"].state.succeeded
    assert raw(run_dir, POD_) == first + second
    # the restarted attempt re-logs steps 1..4 and wins; steps 5, 6 only it has
    assert [r["step"] for r in rows(run_dir)] == [1, 2, 3, 4, 5, 6]
    assert not any(r.startswith("get Pod") for r in fk.requests)


# -- the seam over real HTTP ----------------------------------------------------------------------


def test_kube_watch_sends_version_and_bookmarks_and_reads_events(tmp_path):
    s = FakeApiServer()
    try:
        ev = {"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "8"}}}
        s.routes[("GET", "/api/v1/namespaces/ns/pods")] = (200, lambda q, b: ev if q.get("watch") else {
            "metadata": {"resourceVersion": "7"}, "items": []})
        kube = Kube.connect(str(kubeconfig_for(tmp_path / "kc", s.url)), namespace="ns")
        items, rv = kube.list_with_version(POD, selector=OWNED)
        assert (items, rv) == ([], "7")
        got = list(kube.watch(POD, selector=OWNED, resource_version=rv, timeout_seconds=120))
        assert got == [ev]
        q = s.requests[-1][2]
        assert q["watch"] == "true" and q["resourceVersion"] == "7" and q["allowWatchBookmarks"] == "true"
        assert q["timeoutSeconds"] == "120" and q["labelSelector"] == OWNED
    finally:
        s.close()


def test_kube_watch_error_event_410_is_watch_expired_and_others_keep_their_code(tmp_path):
    s = FakeApiServer()
    try:
        path = "/api/v1/namespaces/ns/pods"
        kube = Kube.connect(str(kubeconfig_for(tmp_path / "kc", s.url)), namespace="ns")
        s.routes[("GET", path)] = (200, {"type": "ERROR", "object": {
            "kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (99)"}})
        with pytest.raises(WatchExpired, match="too old resource version"):
            list(kube.watch(POD, resource_version="1"))
        s.routes[("GET", path)] = (200, {"type": "ERROR", "object": {"code": 500, "message": "etcd hiccup"}})
        with pytest.raises(ApiError) as info:
            list(kube.watch(POD, resource_version="1"))
        assert info.value.status == 500 and not isinstance(info.value, WatchExpired)
        s.status("GET", path, 410, "too old resource version")  # a 410 answer to the request itself
        with pytest.raises(WatchExpired):
            kube.watch(POD, resource_version="1")
    finally:
        s.close()


class _LaggingInformer:
    """A shared watch that synced before a job was created and has not delivered it yet."""

    fatal = error = failing_since = None

    def __init__(self, kube, resource):
        self.kube, self.resource, self._listeners = kube, resource, []

    def wait_synced(self, timeout):
        return True

    def snapshot(self):
        return []

    def add_listener(self, fn):
        self._listeners.append(fn)

    def remove_listener(self, fn):
        self._listeners.remove(fn)


class _LaggingCache:
    def __init__(self, kube):
        self.kube = kube

    def subscribe(self, resource, selector):
        return _LaggingInformer(self.kube, resource)

    def unsubscribe(self, inf):
        pass


def test_a_job_the_shared_watch_has_not_delivered_yet_is_not_taken_for_deleted():
    """A sweep's next run is created after the process's job watch synced: until its ADDED event arrives the
    cache lacks it, and the follower must not report it Deleted (it did, in the sweep e2e). A job that is
    really gone still reads as None."""
    fk = FakeKube()
    fk.put(pytorchjob("late"))
    ref = J.JobRef("pytorchjob", "late", {})
    st = WatchState(fk, ref, cache=_LaggingCache(fk))
    obj, _ = st.read(ref)
    assert obj is not None and obj["metadata"]["name"] == "late"
    fk.delete(PYTORCHJOB, "late")
    obj, _ = st.read(ref)
    assert obj is None
