"""Test doubles for the `Kube` seam (not collected: no test_ prefix).

- `FakeApiServer`: a local plain-HTTP server speaking just enough of the Kubernetes REST API for the
  real `Kube` (and the real kubernetes client underneath) to be exercised: scripted answers per
  method+path, and a record of every request, so a test can prove that *no* request was sent.
- `FakeKube`: an in-memory stand-in with the `Kube` methods the follower uses, including pod logs
  with `follow`, `sinceTime` truncated to whole seconds (as the API server does), `timestamps`,
  `previous`, and streams that block until new lines arrive or the reader shuts them down.
"""
from __future__ import annotations

import datetime as dt
import http.server
import json
import socketserver
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from launcher.kube.client import ApiError, Resource, WatchExpired


# --------------------------------------------------------------------------------------------------
# A fake API server over HTTP


class FakeApiServer:
    """`routes[(METHOD, path)] = (status, body_dict)`; unknown paths answer 404 Status."""

    def __init__(self):
        self.routes: dict[tuple[str, str], tuple[int, dict]] = {}
        self.requests: list[tuple[str, str, dict, bytes]] = []  # method, path, query, body
        self.connections = 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _do(self):
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.requests.append((self.command, u.path, q, body))
                status, obj = outer.routes.get((self.command, u.path), (404, {
                    "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                    "message": f"the server could not find the requested resource ({u.path})"}))
                if callable(obj):
                    obj = obj(q, body)
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _do

            def log_message(self, *a):
                pass

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self):
                outer.connections += 1
                return super().get_request()

        self.server = S(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def status(self, method: str, path: str, code: int, message: str, reason: str = "") -> None:
        self.routes[(method, path)] = (code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                              "message": message, "reason": reason, "code": code})

    def kubeconfig(self, path: Path, token: str = "s3cr3t-token-do-not-print", namespace: str = "default") -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": namespace}}],
        }))
        return path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def kubeconfig_for(path: Path, server: str, token: str = "s3cr3t-token-do-not-print") -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    return path


# --------------------------------------------------------------------------------------------------
# An in-memory Kube


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def rfc3339nano(ns: int) -> str:
    """Go's RFC3339Nano: trailing zeros of the fraction trimmed (so string order != time order)."""
    secs, frac = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    f = f"{frac:09d}".rstrip("0")
    return f"{base}.{f}Z" if f else f"{base}Z"


@dataclass
class FakeLog:
    entries: list[tuple[int, str]] = field(default_factory=list)


class FakeResp:
    """A streaming log response: yields `<ts> <line>\\n` chunks; with follow, waits for more."""

    chunked = False

    def __init__(self, fk: FakeKube, key, since_ns: int | None, follow: bool, chunk_lines: int):
        self.fk, self.key, self.since_ns, self.follow = fk, key, since_ns, follow
        self.i = 0
        self.closed = False
        self.buf = b""
        self.chunk_lines = chunk_lines

    def _take(self) -> bytes:
        log = self.fk.logs.setdefault(self.key, FakeLog())
        out = []
        while self.i < len(log.entries) and len(out) < self.chunk_lines:
            ns, text = log.entries[self.i]
            self.i += 1
            if self.since_ns is None or ns >= self.since_ns:
                out.append(f"{rfc3339nano(ns)} {text}\n")
        return "".join(out).encode()

    def read1(self, n: int) -> bytes:
        while True:
            if self.buf:
                data, self.buf = self.buf[:n], self.buf[n:]
                return data
            if self.closed:
                raise ConnectionError("stream shut down")
            with self.fk.cond:
                data = self._take()
                if not data:
                    if not self.follow:
                        return b""
                    self.fk.cond.wait(0.05)
                    continue
            self.buf = data

    def shutdown(self):
        self.closed = True

    def release_conn(self):
        self.closed = True

    def read(self):
        out = b""
        while chunk := self.read1(65536):
            out += chunk
        return out


class FakeKube:
    """In-memory cluster: one namespace, jobs and pods as dicts, logs per (pod, container, attempt)."""

    def __init__(self, namespace: str = "ns"):
        self.namespace = namespace
        self.objects: dict[tuple[str, str], dict] = {}  # (kind, name) -> obj
        self.logs: dict[tuple[str, str, int], FakeLog] = {}
        self.cond = threading.Condition()
        self.log_requests: list[dict] = []
        self.chunk_lines = 3
        self.server = "fake://"
        self.created: list[dict] = []
        self.deleted: list[tuple[str, str]] = []
        self.on_create = None
        # watches: every change is an event at a new resourceVersion; versions below `gone_below` are compacted
        self.rv = 0
        self.events: list[tuple[int, str, str, dict]] = []  # (rv, kind, type, obj)
        self.gone_below = 0
        self.open_watches: list[FakeWatch] = []
        self.requests: list[str] = []  # "get Kind", "list Kind", "watch Kind", "listrv Kind": what was asked

    # -- the seam ---------------------------------------------------------------------------

    def get(self, res: Resource, name: str, *, namespace=None):
        self.requests.append(f"get {res.kind}")
        obj = self.objects.get((res.kind, name))
        return json.loads(json.dumps(obj)) if obj is not None else None

    def list(self, res: Resource, *, selector=None, field_selector=None, namespace=None, all_namespaces=False):
        self.requests.append(f"list {res.kind}")
        return self._matching(res.kind, selector)

    def _matching(self, kind: str, selector) -> list[dict]:
        out = []
        with self.cond:
            for (k, _), obj in self.objects.items():
                if k == kind and matches(obj, selector):
                    out.append(json.loads(json.dumps(obj)))
        return out

    def list_with_version(self, res: Resource, *, selector=None):
        self.requests.append(f"listrv {res.kind}")
        with self.cond:
            return self._matching(res.kind, selector), str(self.rv)

    def watch(self, res: Resource, *, selector=None, resource_version=None, timeout_seconds=300, read_timeout=90.0):
        """Events after `resource_version` (410 `WatchExpired` when it is below `gone_below`), as the API server."""
        self.requests.append(f"watch {res.kind}")
        with self.cond:
            start = int(resource_version or self.rv)
            if start < self.gone_below:
                raise WatchExpired(410, f"too old resource version: {start} ({self.gone_below})",
                                   f"watch {res.kind}", self.server)
            w = FakeWatch(self, res.kind, selector, start)
            self.open_watches.append(w)
            return w

    def expire_watches(self, change=None) -> None:
        """End every open watch, apply `change()` (a put/delete the watchers miss), and compact the history so a
        re-watch from any version they saw is answered 410 Gone: the watchers must list again."""
        with self.cond:
            for w in self.open_watches:
                w.close()
            self.open_watches.clear()
            if change is not None:
                change()
            self.gone_below = self.rv
            self.cond.notify_all()

    def _event(self, kind: str, type_: str, obj: dict) -> None:
        # caller holds self.cond
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, type_, json.loads(json.dumps(obj))))

    def pod_log(self, pod, *, container=None, follow=False, since_time=None, timestamps=True, previous=False,
                tail_lines=None, read_timeout=None):
        self.log_requests.append(dict(pod=pod, follow=follow, since_time=since_time, previous=previous))
        p = self.objects.get(("Pod", pod))
        if p is None:
            raise ApiError(404, f'pods "{pod}" not found', f"logs of pod {pod}", self.server)
        restart = 0
        for cs in p.get("status", {}).get("containerStatuses") or []:
            if cs["name"] == container:
                restart = cs.get("restartCount", 0)
        attempt = restart - 1 if previous else restart
        if attempt < 0:
            raise ApiError(400, "previous terminated container not found", f"logs of pod {pod}", self.server)
        since_ns = None
        if since_time:
            t = dt.datetime.strptime(since_time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
            since_ns = int(t.timestamp()) * 1_000_000_000
        return FakeResp(self, (pod, container, attempt), since_ns, follow, self.chunk_lines)

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        """Store `obj` (409 if it exists); `on_create(obj)` lets a test play the operator."""
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.objects:
            raise ApiError(409, f"{obj['kind']} {key[1]} already exists", f"create {obj['kind']} {key[1]}", self.server)
        copy = json.loads(json.dumps(obj))
        self.created.append(copy)
        if not dry_run:
            self.put(copy)
            if self.on_create is not None:
                self.on_create(copy)
        return json.loads(json.dumps(copy))

    def delete(self, res: Resource, name: str, *, propagation: str = "Background", namespace=None) -> bool:
        self.deleted.append((res.kind, name))
        with self.cond:
            obj = self.objects.pop((res.kind, name), None)
            if obj is not None:
                self._event(res.kind, "DELETED", obj)
                self.cond.notify_all()
            return obj is not None

    # -- test controls ----------------------------------------------------------------------

    def put(self, obj: dict) -> None:
        with self.cond:
            key = (obj["kind"], obj["metadata"]["name"])
            type_ = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = obj
            self._event(obj["kind"], type_, obj)
            self.cond.notify_all()

    def append(self, pod: str, container: str, attempt: int, lines, ns: int | None = None, step_ns: int = 1000):
        """Append lines; timestamps increase by step_ns (or all equal when step_ns=0)."""
        with self.cond:
            log = self.logs.setdefault((pod, container, attempt), FakeLog())
            t = ns if ns is not None else (log.entries[-1][0] + 1_000_000 if log.entries else
                                           int(T0.timestamp()) * 1_000_000_000)
            for line in lines:
                log.entries.append((t, line))
                t += step_ns
            self.cond.notify_all()


def matches(obj: dict, selector: str | None) -> bool:
    """Equality-based label selector (`k=v,k2=v2`), the only kind the launcher sends."""
    want = dict(kv.split("=", 1) for kv in selector.split(",")) if selector else {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in want.items())


class FakeWatch:
    """One open watch: yields `{"type", "object"}` after its start version, blocking until more happen."""

    def __init__(self, fk: FakeKube, kind: str, selector, start: int):
        self.fk, self.kind, self.selector, self.at = fk, kind, selector, start
        self.closed = False

    def __iter__(self):
        while True:
            with self.fk.cond:
                if self.closed:
                    return
                new = [e for e in self.fk.events if e[0] > self.at]
                if not new:
                    self.fk.cond.wait(0.05)
                    continue
                self.at = new[-1][0]
                batch = [{"type": t, "object": json.loads(json.dumps(o))} for _, k, t, o in new
                         if k == self.kind and matches(o, self.selector)]
            yield from batch

    def close(self):
        self.closed = True


def pytorchjob(name: str, conditions=(("Running", "True"),), experiment="exp") -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "grpo-launcher",
                                                  "grpo.launcher.io/experiment": experiment},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


def pod(name: str, job: str, *, phase="Running", container="pytorch", restart=0, state="running", uid=None,
        labels=None, owner=None) -> dict:
    st = {"running": {"startedAt": "2026-01-01T00:00:00Z"}} if state == "running" else \
        {"terminated": {"exitCode": 0, "reason": "Completed"}} if state == "terminated" else \
        {"waiting": {"reason": state}}
    md = {"name": name, "uid": uid or f"uid-{name}", "creationTimestamp": "2026-01-01T00:00:00Z",
          "labels": labels if labels is not None else {"app.kubernetes.io/name": "verl-grpo",
                                                       "app.kubernetes.io/instance": job,
                                                       "app.kubernetes.io/part-of": "grpo-launcher"}}
    if owner:
        md["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"containers": [{"name": container}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": container, "restartCount": restart, "state": st}]}}


CLI_NS = "team-a"  # the namespace of `cli_api`'s kubeconfig context


@pytest.fixture(name="api")
def cli_api(tmp_path, monkeypatch):
    """Fixture `api`: a FakeApiServer the CLI reaches through $KUBECONFIG (context namespace CLI_NS), with the
    launcher's run directories under tmp_path. Import it into a test module to use it."""
    s = FakeApiServer()
    monkeypatch.setenv("KUBECONFIG", str(s.kubeconfig(tmp_path / "kubeconfig", namespace=CLI_NS)))
    monkeypatch.setenv("LAUNCHER_RUNS_DIR", str(tmp_path / "runs"))
    yield s
    s.close()
