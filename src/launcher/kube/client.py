"""The one seam over the Kubernetes API: every request the launcher sends goes through `Kube`.

`Kube(api_client, namespace)` takes an injectable `kubernetes.client.ApiClient` (tests pass one
bound to a fake or a local server); `Kube.connect(kubeconfig, context, namespace)` builds one from a
kubeconfig the way kubectl does. Objects travel as plain dicts (what `render` produces and what the
server returns), through one generic REST path, so PyTorchJob, RayJob, ConfigMap and Pod are all
handled alike and no typed model can drop a field it does not know.

Every failure becomes one line: `ClusterError` (exit 3) for 401/403/409/422/5xx, timeouts and an
unreachable server; 404 is returned as `None` by `get` (callers decide what "missing" means). Only
transport errors (urllib3, sockets) are read as "unreachable": any other exception is a bug in the
launcher and surfaces as one, never as a cluster problem. Requests go through the urllib3 pool the
kubernetes client configured, which every supported client release has (pyproject: kubernetes>=30.1).
Messages name the server URL and the object, never credentials (a kubeconfig's token or key never
reaches a message: `ApiException.__str__` prints response headers, so we never use it).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from launcher.errors import BadInput, ClusterError
from launcher.kube.clientlog import ClientLog, client_log
from launcher.kube.pod_exec import run_exec

# Seconds: connect, read. Reads are bounded so a dead connection surfaces as a timeout, not a hang.
DEFAULT_TIMEOUT = (10.0, 30.0)
# What Kubernetes mounts into every pod with a service account token (kubectl's in-cluster config reads it).
SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        return base + "".join(f"/{part}" for part in (self.plural, name, sub) if part)


PYTORCHJOB = Resource("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs")
RAYJOB = Resource("RayJob", "ray.io", "v1", "rayjobs")
TRAINJOB = Resource("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs")
TRAININGRUNTIME = Resource("TrainingRuntime", "trainer.kubeflow.org", "v1alpha1", "trainingruntimes")
JOBSET = Resource("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets")
CONFIGMAP = Resource("ConfigMap", "", "v1", "configmaps")
PVC = Resource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims")
POD = Resource("Pod", "", "v1", "pods")
EVENT = Resource("Event", "", "v1", "events")
NODE = Resource("Node", "", "v1", "nodes", namespaced=False)
NAMESPACE = Resource("Namespace", "", "v1", "namespaces", namespaced=False)
BATCH_JOB = Resource("Job", "batch", "v1", "jobs")

KINDS: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r for r in (PYTORCHJOB, RAYJOB, TRAINJOB, TRAININGRUNTIME, JOBSET, CONFIGMAP, PVC, POD,
                                          EVENT, NODE, NAMESPACE, BATCH_JOB)
}
JOB_RESOURCES = {"pytorchjob": PYTORCHJOB, "rayjob": RAYJOB, "trainjob": TRAINJOB}


def resource_of(obj: dict) -> Resource:
    """The `Resource` of a rendered object (its apiVersion + kind)."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if key not in KINDS:
        raise BadInput(f"unsupported object kind {key[1]!r} ({key[0]!r})")
    return KINDS[key]



class Kube:
    """Namespaced access to the API server. Construct with an ApiClient; see `connect`."""

    def __init__(self, api_client, namespace: str = "default", *, timeout: tuple[float, float] = DEFAULT_TIMEOUT,
                 logs: ClientLog | None = None):
        self.api = api_client
        self.namespace = namespace
        self.timeout = timeout
        self.logs = logs or client_log()  # the client's own log lines, kept off stderr

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None,
                namespace: str | None = None, *, serviceaccount_dir: Path = SERVICEACCOUNT_DIR) -> Kube:
        """Load a kubeconfig like kubectl (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`, in-cluster).

        The namespace is the explicit one, else the context's, else (in a pod) `$POD_NAMESPACE` or
        the service account's (`serviceaccount_dir/namespace`, as client-go does), else `default`.
        An exec credential plugin that fails is a `ClusterError` naming the plugin's message.
        """
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
        from kubernetes.config.incluster_config import InClusterConfigLoader

        logs = client_log()
        logs.take_errors()  # only what this load logs counts
        cfg = client.Configuration()
        ctx_ns = None
        # The client reads $KUBECONFIG once, at import (kubernetes<37 also for its default path): always pass
        # the file, read per call like kubectl (and tests) expect.
        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
        path = kubeconfig or os.path.expanduser("~/.kube/config")
        try:
            try:
                contexts, active = config.list_kube_config_contexts(config_file=path)
                chosen = next((c for c in contexts if c["name"] == context), None) if context else active
                if context and chosen is None:
                    raise BadInput(f"--context {context}: no such context in the kubeconfig")
                ctx_ns = (chosen or {}).get("context", {}).get("namespace")
                config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
                user = (chosen or {}).get("context", {}).get("user", "?")
            except (ConfigException, FileNotFoundError) as exc:
                if kubeconfig or context:
                    raise BadInput(f"kubeconfig: {_one_line(exc)}") from None
                try:
                    InClusterConfigLoader(token_filename=str(serviceaccount_dir / "token"),
                                          cert_filename=str(serviceaccount_dir / "ca.crt")).load_and_set(cfg)
                except ConfigException:
                    raise ClusterError(
                        "no cluster configured: no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) "
                        "and not running in a pod") from None
                ctx_ns = os.environ.get("POD_NAMESPACE") or _read_first_line(serviceaccount_dir / "namespace")
                user = "in-cluster service account"
        except OSError as exc:
            raise BadInput(f"kubeconfig: {exc.strerror or exc}") from None
        # The loader logs a failed exec plugin (and carries on without credentials): that is the error.
        failed = logs.take_errors()
        if failed:
            raise ClusterError(f"cannot get credentials for kubeconfig user {user}: {failed}")
        # One quick retry for a connection blip; a down server should fail fast with a clear line.
        cfg.retries = 1
        return cls(client.ApiClient(cfg), namespace or ctx_ns or "default", logs=logs)

    @property
    def server(self) -> str:
        return getattr(self.api.configuration, "host", "?")

    # -- generic REST -------------------------------------------------------------------------

    def request(self, method: str, path: str, *, query: dict | None = None, body: Any = None,
                content_type: str = "application/json", stream: bool = False,
                timeout: tuple[float, float] | float | None = None, what: str = ""):
        """One HTTP request; JSON in, JSON (dict) out, or the raw urllib3 response when `stream`.

        Raises `ClusterError` with one line for every failure; `ApiError` keeps the status so
        callers can branch on 404/409. Only transport failures (urllib3, sockets) become
        `ClusterUnreachable`/`ClusterTimeout`; anything else is a bug in the launcher and propagates.
        """
        import urllib3

        what = what or f"{method} {path}"
        q = [(k, _qv(v)) for k, v in (query or {}).items() if v is not None]
        url = self.server + path + (f"?{urlencode(q)}" if q else "")
        headers = {**self.api.default_headers, "Accept": "application/json, */*", "Content-Type": content_type,
                   **_auth_headers(self.api.configuration)}
        t = timeout or self.timeout
        # The urllib3 pool the client configured (CA, client certificate, proxy, retries) is used directly:
        # kubernetes 37 regenerated `ApiClient` (`param_serialize` is new, `call_api` changed signature, 36.0.3
        # still has the old ones); the pool and `Configuration.auth_settings()` are the same in 30.1 and 37.
        try:
            resp = self.api.rest_client.pool_manager.request(
                method, url, body=None if body is None else json.dumps(body), headers=headers,
                timeout=urllib3.Timeout(connect=t[0], read=t[1]) if isinstance(t, tuple) else urllib3.Timeout(t),
                preload_content=False)
            if not 200 <= resp.status <= 299:
                data = resp.read()
                resp.release_conn()
                raise ApiError(resp.status, _status_message(data), what, self.server,
                               hint=self.logs.take_errors() if resp.status == 401 else "")
            if stream:
                return resp
            data = resp.read()
            resp.release_conn()
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # unreachable, refused, timed out, TLS
            raise self._network_error(exc, what) from None
        try:
            # orjson: a LIST of 1,000 jobs is ~10 MB of JSON, which the standard library decodes ~5x slower
            return orjson.loads(data) if data else {}
        except ValueError:  # a proxy's HTML page, say: the server's fault, not ours (orjson's error is one)
            raise ClusterError(f"the API server at {self.server} answered {what} with something that is not "
                               f"JSON: {_one_line(data[:80].decode('utf-8', 'replace'))}") from None

    def _network_error(self, exc: Exception, what: str) -> ClusterError:
        """The one line for a transport failure (the caller only passes urllib3/socket errors)."""
        import urllib3.exceptions as ue

        text = _one_line(exc)
        if isinstance(exc, (ue.ReadTimeoutError, ue.ConnectTimeoutError, socket.timeout, TimeoutError)) \
                or "timed out" in text.lower():
            return ClusterTimeout(f"the API server at {self.server} did not answer in time ({what})")
        if "refused" in text.lower():
            return ClusterUnreachable(f"cannot reach the API server at {self.server}: connection refused")
        if isinstance(exc, ue.SSLError) or "ssl" in text.lower() or "certificate" in text.lower():
            return ClusterError(f"TLS error talking to the API server at {self.server}: check the kubeconfig's CA")
        return ClusterUnreachable(f"cannot reach the API server at {self.server}: {_short_cause(exc)}")

    # -- typed helpers ------------------------------------------------------------------------

    def get(self, res: Resource, name: str, *, namespace: str | None = None) -> dict | None:
        """The object, or None when it does not exist (404)."""
        try:
            return self.request("GET", res.path(namespace or self.namespace, name), what=f"get {res.kind} {name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, res: Resource, *, selector: str | None = None, field_selector: str | None = None,
             namespace: str | None = None, all_namespaces: bool = False) -> list[dict]:
        """Items matching a label selector (kubectl `get -l`)."""
        ns = None if all_namespaces else (namespace or self.namespace)
        out = self.request("GET", res.path(ns), query={"labelSelector": selector, "fieldSelector": field_selector},
                           what=f"list {res.plural}")
        return out.get("items") or []

    def list_with_version(self, res: Resource, *, selector: str | None = None) -> tuple[list[dict], str]:
        """Items matching a label selector plus the list's resourceVersion, where a watch of them starts."""
        out = self.request("GET", res.path(self.namespace), query={"labelSelector": selector},
                           what=f"list {res.plural}")
        return out.get("items") or [], str((out.get("metadata") or {}).get("resourceVersion") or "")

    def watch(self, res: Resource, *, selector: str | None = None, resource_version: str | None = None,
              timeout_seconds: int = 300, read_timeout: float = 90.0) -> WatchStream:
        """A watch of `res` from `resource_version` (kubectl `get -w`): a `WatchStream` of event dicts.

        Bookmarks are asked for, so an idle watch still learns newer resourceVersions; the server ends the
        watch after `timeout_seconds`, and a read that hears nothing for `read_timeout` is a cut. A version the
        server no longer has arrives as an ERROR event with code 410 (`WatchExpired` from `WatchStream`).
        """
        query = {"watch": "true", "labelSelector": selector, "resourceVersion": resource_version or None,
                 "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
        what = f"watch {res.plural}"
        try:
            resp = self.request("GET", res.path(self.namespace), query=query, stream=True,
                                timeout=(self.timeout[0], read_timeout), what=what)
        except ApiError as exc:
            if exc.status == 410:
                raise WatchExpired(exc.status, exc.server_message, what, self.server) from None
            raise
        return WatchStream(resp, what, self)

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        """Create `obj` in its namespace; `dry_run` is kubectl's `--dry-run=server` (dryRun=All)."""
        res = resource_of(obj)
        ns = obj.get("metadata", {}).get("namespace") or self.namespace
        name = obj.get("metadata", {}).get("name", "?")
        return self.request("POST", res.path(ns), body=obj, query={"dryRun": "All" if dry_run else None},
                            what=f"create {res.kind} {name}")

    def patch(self, res: Resource, name: str, patch: dict, *, namespace: str | None = None,
              sub: str | None = None) -> dict:
        """JSON merge patch (kubectl `patch --type merge`)."""
        return self.request("PATCH", res.path(namespace or self.namespace, name, sub), body=patch,
                            content_type="application/merge-patch+json", what=f"patch {res.kind} {name}")

    def delete(self, res: Resource, name: str, *, propagation: str = "Background",
               namespace: str | None = None) -> bool:
        """Delete with a propagation policy (Foreground/Background/Orphan); False when already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self.request("DELETE", res.path(namespace or self.namespace, name), body=body,
                         what=f"delete {res.kind} {name}")
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise

    def pod_log(self, pod: str, *, container: str | None = None, follow: bool = False,
                since_time: str | None = None, timestamps: bool = True, previous: bool = False,
                tail_lines: int | None = None, read_timeout: float | None = None):
        """The pod's log as a raw streaming HTTP response (urllib3), kubectl `logs` semantics.

        `since_time` is RFC3339; the server truncates it to whole seconds, so callers dedupe the
        boundary (see `follow`). Caller reads with `.stream()`/`.read1()` and closes it.
        """
        query = {"container": container, "follow": "true" if follow else None,
                 "sinceTime": since_time, "timestamps": "true" if timestamps else None,
                 "previous": "true" if previous else None, "tailLines": tail_lines}
        return self.request("GET", POD.path(self.namespace, pod, "log"), query=query, stream=True,
                            timeout=(self.timeout[0], read_timeout or self.timeout[1]), what=f"logs of pod {pod}")

    def exec(self, pod: str, argv: list[str], *, container: str | None = None):
        """Run `argv` in a running pod's container with stdin, stdout and stderr attached (kubectl `exec -i`): the
        client's websocket (`kubernetes.stream`), open on return. A refusal is an `ApiError` with its status (403:
        RBAC's `create pods/exec`)."""
        from kubernetes.client import CoreV1Api
        from kubernetes.client.rest import ApiException
        from kubernetes.stream import stream

        what = f"exec in pod {pod}"
        try:
            return stream(CoreV1Api(self.api).connect_get_namespaced_pod_exec, pod, self.namespace, command=argv,
                          container=container, stdin=True, stdout=True, stderr=True, tty=False,
                          _preload_content=False)
        except ApiException as exc:
            # a refused websocket handshake comes back as status 0, the answer's status line and body in its reason
            status, message = (exc.status, _status_message(exc.body)) if exc.status else _handshake(str(exc.reason))
            # Kubernetes 1.35's second check (create) is refused with an empty reason: say what is needed
            hint = "an exec needs get and create on pods/exec: `launcher rbac`" if status == 403 else ""
            raise ApiError(status, message or _one_line(exc.reason), what, self.server, hint) from None
        except OSError as exc:
            raise self._network_error(exc, what) from None

    def run_in_pod(self, pod: str, argv: list[str], *, container: str | None = None,
                   timeout: float = 600) -> tuple[str, str, int | None]:
        """Run `argv` in the pod to its end (kubectl `exec`, no stdin): (stdout, stderr, exit code)."""
        return run_exec(self, pod, argv, container=container, timeout=timeout)

    def events_for(self, names: set[str]) -> list[dict]:
        """Events in the namespace whose involved object is one of `names`, oldest first."""
        items = [e for e in self.list(EVENT) if (e.get("involvedObject") or {}).get("name") in names]
        return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or
                      (e.get("metadata") or {}).get("creationTimestamp") or "")

    def api_group_has(self, res: Resource) -> bool:
        """Whether the server serves `res` (its CRD is installed): API discovery, kubectl `api-resources`."""
        return res.plural in (self.api_resources(res.group, res.version) or [])

    def version(self) -> dict:
        """The server's build info (kubectl `version`): `gitVersion`, `major`, `minor`, ..."""
        return self.request("GET", "/version", what="read the server version")

    def api_groups(self) -> dict[str, list[str]]:
        """Served API groups and their versions, preferred version first (kubectl `api-versions`)."""
        out = self.request("GET", "/apis", what="discover API groups")
        groups: dict[str, list[str]] = {}
        for g in out.get("groups") or []:
            versions = [v.get("version") for v in g.get("versions") or [] if v.get("version")]
            preferred = (g.get("preferredVersion") or {}).get("version")
            if preferred in versions:
                versions = [preferred] + [v for v in versions if v != preferred]
            groups[g.get("name", "")] = versions
        return groups

    def api_resources(self, group: str, version: str) -> list[str] | None:
        """Resource names (plurals, with subresources like `pods/log`) served at group/version; None if not served."""
        try:
            out = self.request("GET", f"/apis/{group}/{version}" if group else f"/api/{version}",
                               what=f"discover {group}/{version}")
        except ApiError as exc:
            if exc.status in (404, 503):
                return None
            raise
        return [r.get("name", "") for r in out.get("resources") or []]

    def access_review(self, verb: str, group: str, resource: str, *, subresource: str = "",
                      namespace: str | None = None) -> tuple[bool, str]:
        """May the current user `verb` the resource? (kubectl `auth can-i`): (allowed, reason)."""
        attrs = {"verb": verb, "group": group, "resource": resource}
        if subresource:
            attrs["subresource"] = subresource
        if namespace:
            attrs["namespace"] = namespace
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}
        out = self.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body,
                           what=f"review access to {verb} {resource}")
        st = out.get("status") or {}
        return bool(st.get("allowed")), st.get("reason") or ""

    def whoami(self) -> str | None:
        """The authenticated user name (kubectl `auth whoami`), or None when the server cannot tell."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            out = self.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body,
                               what="review the current user")
        except ApiError:
            return None
        return ((out.get("status") or {}).get("userInfo") or {}).get("username")


class ApiError(ClusterError):
    """A non-2xx answer from the API server: one line, with the status kept for callers."""

    def __init__(self, status: int, server_message: str, what: str, server: str, hint: str = ""):
        self.status = status
        self.server_message = server_message
        line = _status_line(status, server_message, what, server)
        super().__init__(f"{line} ({hint})" if hint else line)


# What `unless_forbidden` returns for a 403 where None already means something (a `get`'s 404).
FORBIDDEN = object()


def unless_forbidden(call, *args, default=None, **kwargs):
    """`call(*args, **kwargs)` (a `Kube` read), or `default` when the API server answers 403: an optional read
    (rbac.CALLS) the caller does without."""
    try:
        return call(*args, **kwargs)
    except ApiError as exc:
        if exc.status != 403:
            raise
        return default


class WatchExpired(ApiError):
    """410 Gone: the watch's resourceVersion is older than the server keeps; list again, then watch from there."""


class WatchStream:
    """The events of one watch request, as dicts (`type`, `object`); `close()` from another thread ends it.

    Transport failures mid-stream become `ClusterError`s like every other request's; an ERROR event with code
    410 raises `WatchExpired`, any other ERROR event an `ApiError` with its code."""

    def __init__(self, resp, what: str, kube: Kube):
        self.resp = resp
        self.what = what
        self.kube = kube
        self.closed = False

    def __iter__(self):
        import urllib3

        pending = b""
        try:
            while True:
                try:
                    chunk = self.resp.read1(65536) if hasattr(self.resp, "read1") else self.resp.read(65536)
                except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as exc:
                    if self.closed:
                        return
                    raise self.kube._network_error(exc, self.what) from None
                if not chunk:
                    if pending.strip():  # the last event of a closed stream may lack its newline
                        yield self._event(pending)
                    return
                pending += chunk
                while b"\n" in pending:
                    line, _, pending = pending.partition(b"\n")
                    if line.strip():
                        yield self._event(line)
        finally:
            self.close()

    def _event(self, line: bytes) -> dict:
        try:
            event = json.loads(line)
        except ValueError:
            raise ClusterError(f"the API server at {self.kube.server} sent a watch event that is not JSON "
                               f"({self.what})") from None
        if event.get("type") == "ERROR":
            obj = event.get("object") or {}
            code = int(obj.get("code") or 500)
            cls = WatchExpired if code == 410 else ApiError
            raise cls(code, _one_line(obj.get("message", "")), self.what, self.kube.server)
        return event

    def close(self) -> None:
        """End the stream (safe from any thread, and more than once)."""
        if self.closed:
            return
        self.closed = True
        for step in ("shutdown", "release_conn"):
            try:
                getattr(self.resp, step)()
            except Exception:
                pass


class ClusterUnreachable(ClusterError):
    """No TCP/TLS connection to the API server."""


class ClusterTimeout(ClusterError):
    """The API server accepted the connection but did not answer in time."""


def transient(exc: ClusterError) -> bool:
    """Worth retrying: unreachable, timed out, or a 429/5xx (an API server restarting answers these)."""
    if isinstance(exc, (ClusterUnreachable, ClusterTimeout)):
        return True
    return isinstance(exc, ApiError) and (exc.status == 429 or exc.status >= 500)


def _status_line(status: int, message: str, what: str, server: str) -> str:
    msg = message or "no details"
    if status == 401:
        return (f"the API server at {server} refused the credentials (401 Unauthorized) while trying to {what}: "
                "check --kubeconfig/--context")
    if status == 403:
        return f"forbidden (403) to {what}: {msg}"
    if status == 404:
        return f"not found (404): {what}: {msg}"
    if status == 409:
        return f"conflict (409) on {what}: {msg}"
    if status == 422:
        return f"the API server rejected {what} as invalid (422): {msg}"
    if status == 429 or status >= 500:
        return f"the API server at {server} failed to {what} ({status}): {msg}"
    return f"the API server answered {status} to {what}: {msg}"


def _handshake(reason: str) -> tuple[int, str]:
    """(status, the Status body's message) from websocket-client's "Handshake status 403 Forbidden -+-+- {headers}
    -+-+- BODY", BODY the answer as text or as a bytes repr by client version (0 and "" where it has none)."""
    import ast
    import re

    status = re.search(r"Handshake status (\d{3})", reason)
    parts = reason.split(" -+-+- ")
    body = parts[-1].strip() if len(parts) >= 3 else ""
    try:
        data = ast.literal_eval(body) if body[:2] in ("b'", 'b"') else body.encode()
    except (ValueError, SyntaxError):
        data = b""
    return int(status.group(1)) if status else 0, _status_message(data) if data.startswith(b"{") else ""


def _status_message(data: bytes | None) -> str:
    """`message` of a Kubernetes Status body, on one line; never the raw body of something else."""
    if not data:
        return ""
    try:
        body = json.loads(data)
    except ValueError:
        return _one_line(data[:200].decode("utf-8", "replace"))
    return _one_line(body.get("message", "")) if isinstance(body, dict) else ""


def _qv(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _auth_headers(cfg) -> dict[str, str]:
    """The bearer token header, as the generated client sends it (refreshing an exec/OIDC token first).

    `Configuration.auth_settings()` has had this shape in every release the launcher supports.
    """
    setting = cfg.auth_settings().get("BearerToken") or {}
    if setting.get("in") == "header" and setting.get("value"):
        return {setting["key"]: setting["value"]}
    return {}


def _read_first_line(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _one_line(x: Any) -> str:
    return " ".join(str(x).split())


def _short_cause(exc: Exception) -> str:
    """The innermost reason of a urllib3 retry error ('Name or service not known', ...)."""
    reason = getattr(exc, "reason", None) or exc
    text = _one_line(reason)
    # urllib3 prints "<urllib3.connection.HTTPSConnection object at 0x...>: Failed to ..."; keep the human part
    if ">: " in text:
        text = text.split(">: ", 1)[1]
    return text[:200]
