"""Cluster state through watches: one list + watch per (kind, label selector), shared by every follower.

An `Informer` lists its objects once (keeping the list's resourceVersion), then watches from there and
applies ADDED/MODIFIED/DELETED to its cache. A watch that ends (the server's `timeoutSeconds`, a cut
connection, an API server restart) is re-opened from the last resourceVersion it saw (bookmarks keep it
fresh while nothing changes); a 410 Gone (that version is older than the server keeps) lists again and
watches from the new list. While the API server is away it retries with a growing pause and the cache
keeps the last state it knew; `failing_since` says since when.

`ClusterStateCache` hands out informers keyed by (namespace, resource, selector), counted by their
subscribers, so N runs followed in one process cost one watch per kind, not N polls: the launcher's jobs
by `app.kubernetes.io/part-of=grpo-launcher`, and their pods by the same label (every pod template the
launcher renders carries it; KubeRay keeps it on Ray pods). Readers take snapshots (plain dicts, never
mutated in place) and wait on `changed` for the next event.

Steady state costs (per kind, for all runs together): one watch request per `timeout_seconds`
(default 300 s), plus one per silent `read_timeout` when the server sends no bookmark in that time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

from launcher.errors import ClusterError
from launcher.kube.client import ApiError, Kube, Resource, WatchExpired


def _key(obj: dict) -> str:
    md = obj.get("metadata") or {}
    return md.get("uid") or md.get("name") or ""


class Informer:
    """The objects of one kind and label selector in one namespace, kept current by a watch thread."""

    def __init__(self, kube: Kube, resource: Resource, selector: str | None, *, timeout_seconds: int = 300,
                 read_timeout: float = 90.0, backoff: tuple[float, float] = (0.5, 5.0)):
        self.kube = kube
        self.resource = resource
        self.selector = selector
        self.timeout_seconds = timeout_seconds
        self.read_timeout = read_timeout
        self.backoff = backoff
        self.objects: dict[str, dict] = {}
        self.resource_version = ""
        self.changed = threading.Condition()
        self.generation = 0  # bumped on every change (and on every error state change): waiters compare it
        self.synced = threading.Event()  # the first list has arrived
        self.failing_since: float | None = None  # monotonic time of the first failure in a row, None when healthy
        self.error: ClusterError | None = None  # the last failure (transient or not)
        self.fatal: ClusterError | None = None  # a failure no retry fixes (401/403/404): readers raise it
        # counters, for tests and the benchmark: lists sent, watches opened, 410s seen
        self.lists = 0
        self.watches = 0
        self.expired = 0
        self._stream = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource.plural}", daemon=True)
        self._listeners: list[Callable[[], None]] = []

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        s = self._stream
        if s is not None:
            s.close()
        self._thread.join(timeout=5)

    # -- readers ----------------------------------------------------------------------------------

    def snapshot(self) -> list[dict]:
        """The objects as last seen (dicts the informer replaces, never edits: safe to read, do not modify)."""
        with self.changed:
            return list(self.objects.values())

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    def wait(self, generation: int, timeout: float) -> int:
        """Block until the cache changes past `generation` (or `timeout`); returns the current generation."""
        with self.changed:
            if self.generation == generation:
                self.changed.wait(timeout)
            return self.generation

    def add_listener(self, fn: Callable[[], None]) -> None:
        """`fn()` after every change (from the watch thread: keep it short, e.g. set an Event)."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        """Undo `add_listener(fn)`; nothing if `fn` is not registered."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(fn)

    # -- the watch thread -------------------------------------------------------------------------

    def _bump(self) -> None:
        # caller holds self.changed
        self.generation += 1
        self.changed.notify_all()
        for fn in list(self._listeners):
            fn()

    def _relist(self) -> None:
        self.lists += 1
        items, rv = self.kube.list_with_version(self.resource, selector=self.selector)
        with self.changed:
            self.objects = {_key(o): o for o in items}
            self.resource_version = rv
            self._healthy()
            self.synced.set()
            self._bump()

    def _healthy(self) -> None:
        self.failing_since = None
        self.error = None

    def _apply(self, event: dict) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self.changed:
            if rv:
                self.resource_version = rv
            self._healthy()
            if kind == "BOOKMARK":
                return
            if kind == "DELETED":
                self.objects.pop(_key(obj), None)
            elif kind in ("ADDED", "MODIFIED"):
                self.objects[_key(obj)] = obj
            else:
                return
            self._bump()

    def _failed(self, exc: ClusterError) -> None:
        with self.changed:
            self.error = exc
            if self.failing_since is None:
                self.failing_since = time.monotonic()
            if isinstance(exc, ApiError) and exc.status in (401, 403, 404):
                self.fatal = exc
            self._bump()

    def _run(self) -> None:
        pause = self.backoff[0]
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self.watches += 1
                stream = self.kube.watch(self.resource, selector=self.selector,
                                         resource_version=self.resource_version,
                                         timeout_seconds=self.timeout_seconds, read_timeout=self.read_timeout)
                self._stream = stream
                with self.changed:  # the server answers again: readers may trust the cache
                    if self.error is not None:
                        self._healthy()
                        self._bump()
                opened = time.monotonic()
                try:
                    for event in stream:
                        self._apply(event)
                        pause = self.backoff[0]
                        if self._stop.is_set():
                            break
                except WatchExpired:
                    raise
                except ClusterError:
                    pass  # cut mid-stream (reset, silent past read_timeout): the re-watch below tells if it is down
                finally:
                    self._stream = None
                    stream.close()
                # an end (timeoutSeconds, the server closing, a cut): watch again from the last version seen;
                # a watch that ends at once every time must not spin
                if time.monotonic() - opened < 1.0:
                    self._stop.wait(self.backoff[0])
            except WatchExpired:
                self.expired += 1
                need_list = True  # the version is gone: list again (no pause: the server is answering)
            except ClusterError as exc:
                self._failed(exc)
                if self.fatal is not None:
                    return
                # an outage or a cut: retry from the last version (a 410 afterwards re-lists)
                self._stop.wait(pause)
                pause = min(pause * 2, self.backoff[1])


class ClusterStateCache:
    """Shared informers, one per (namespace, kind, selector), started on first subscribe, stopped on last leave.

    `shared(kube)` is the process-wide cache of one connection: every follower in the process (one run or a
    sweep's N) subscribes to the same informers."""

    _registry: dict[int, ClusterStateCache] = {}
    _registry_lock = threading.Lock()

    def __init__(self, kube: Kube, **informer_kw):
        self.kube = kube
        self.informer_kw = informer_kw
        self._informers: dict[tuple[str, str, str], tuple[Informer, int]] = {}
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, kube: Kube) -> ClusterStateCache:
        with cls._registry_lock:
            cache = cls._registry.get(id(kube))
            if cache is None or cache.kube is not kube:
                cache = cls._registry[id(kube)] = cls(kube)
            return cache

    def subscribe(self, resource: Resource, selector: str | None) -> Informer:
        """The informer for `resource` objects matching `selector`; call `unsubscribe` with it when done."""
        key = (self.kube.namespace, resource.path(), selector or "")
        with self._lock:
            inf, n = self._informers.get(key, (None, 0))
            if inf is None:
                inf = Informer(self.kube, resource, selector, **self.informer_kw).start()
            self._informers[key] = (inf, n + 1)
            return inf

    def unsubscribe(self, inf: Informer) -> None:
        key = (self.kube.namespace, inf.resource.path(), inf.selector or "")
        with self._lock:
            cur, n = self._informers.get(key, (None, 0))
            if cur is not inf:
                return
            if n <= 1:
                del self._informers[key]
            else:
                self._informers[key] = (inf, n - 1)
                return
        inf.stop()

    def informers(self) -> list[Informer]:
        with self._lock:
            return [i for i, _ in self._informers.values()]
