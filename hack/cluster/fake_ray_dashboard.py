#!/usr/bin/env python3
"""Fake Ray dashboard, used as the KubeRay operator's HTTP_PROXY.

Usage: fake_ray_dashboard.py PORT [RUN_SECONDS] [FINAL_STATUS]

The operator's dashboard client is a plain net/http client, so with HTTP_PROXY=http://127.0.0.1:PORT every
request to http://<head-svc>.<ns>.svc.cluster.local:8265/... arrives here as an absolute-URI request.
GET /api/jobs/<id> answers RUNNING for RUN_SECONDS after the first poll of that id, then FINAL_STATUS.
The proxy only sees the URL, so the one per-job knob is the job id: KubeRay derives it from the RayJob name
(<name>-<suffix>), so a RayJob whose name contains "-fail" ends FAILED.

Real pods: when the request's host resolves (through the real node's CoreDNS, GRPO_NODE_DNS=ip:port) to an
address in the real node's pod range (GRPO_REAL_POD_CIDR), the Ray head is a real pod running a real
dashboard, and the request is forwarded to it unchanged: those RayJobs succeed or fail for real. The host
cannot resolve cluster names by itself (the operator runs outside the cluster), hence this hop.

Canned statuses only for a head proven fake: one whose name resolves to addresses outside the real pod range
(a KWOK pod), or any head while no real node is up (the DNS address is not on this host, so no real pod can
exist). Once the real nodes are up, a lookup that fails or finds no address answers 503 with the reason and
the operator retries: a real RayJob's state comes from its real Ray head or fails loudly, never invented.
"""
import http.client
import http.server
import ipaddress
import json
import os
import random
import re
import socket
import socketserver
import struct
import sys
import time
import urllib.parse

PORT = int(sys.argv[1])
RUN = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
FINAL = sys.argv[3] if len(sys.argv) > 3 else "SUCCEEDED"
first_seen: dict[str, float] = {}
REAL_NET = ipaddress.ip_network(os.environ["GRPO_REAL_POD_CIDR"]) if os.environ.get("GRPO_REAL_POD_CIDR") else None
DNS = os.environ.get("GRPO_NODE_DNS", "")


def resolve_a(name: str, server: str, timeout: float = 1.0) -> list[str]:
    """IPv4 addresses of `name` from one DNS server (a minimal RFC 1035 A query: the stdlib has no resolver
    that can be pointed at a server)."""
    host, _, port = server.partition(":")
    qid = random.randrange(65536)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, (host, int(port or 53)))
        data = s.recv(4096)
    rid, flags, qd, an = struct.unpack(">HHHH", data[:8])
    if rid != qid or flags & 0x000F:
        return []
    off = 12
    for _ in range(qd):  # skip the question
        while data[off]:
            off += data[off] + 1
        off += 5
    out = []
    for _ in range(an):
        off += 2 if data[off] & 0xC0 == 0xC0 else len(data[off:].split(b"\0", 1)[0]) + 1
        rtype, _cls, _ttl, rdlen = struct.unpack(">HHIH", data[off:off + 10])
        off += 10
        if rtype == 1 and rdlen == 4:
            out.append(socket.inet_ntoa(data[off:off + 4]))
        off += rdlen
    return out


class Unresolved(Exception):
    """The head's name could not be resolved while real nodes are up: neither real nor provably fake."""


def real_nodes_up() -> bool:
    """True when the real nodes' DNS address is one of this host's (their bridge exists)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((DNS.partition(":")[0], 0))
        except OSError:
            return False
    return True


def real_target(url: str) -> tuple[str, int] | None:
    """(pod IP, port) when the URL's host is a real pod on the real node, None when it is a KWOK fake; raises
    Unresolved when that cannot be told (see the module docstring)."""
    if REAL_NET is None or not DNS:
        return None
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return None
    if not real_nodes_up():
        return None
    try:
        ips = resolve_a(parts.hostname, DNS)
    except OSError as exc:
        raise Unresolved(f"DNS {DNS} did not answer for {parts.hostname}: {exc}") from exc
    if not ips:
        raise Unresolved(f"{parts.hostname} has no address in the cluster's DNS ({DNS}) yet")
    for ip in ips:
        if ipaddress.ip_address(ip) in REAL_NET:
            return ip, parts.port or 80
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    def _forward(self) -> bool:
        """Forward to a real dashboard if the target is a real pod; True when answered."""
        try:
            target = real_target(self.path)
        except Unresolved as exc:
            self.send_error(503, f"not answering for a Ray head that may be real: {exc}")
            return True
        if target is None:
            return False
        parts = urllib.parse.urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        try:
            conn = http.client.HTTPConnection(*target, timeout=30)
            conn.request(self.command, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as exc:
            self.send_error(502, f"real dashboard {target[0]}:{target[1]} unreachable: {exc}")
            return True
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()
        return True

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        if self._forward():
            return
        m = re.search(r"/api/jobs/([^/?]+)/?(?:\?.*)?$", self.path)
        if not m:
            if re.search(r"/api/jobs/?(?:\?.*)?$", self.path):
                return self._json(200, [])
            return self._json(200, {})
        jid = m.group(1)
        t0 = first_seen.setdefault(jid, time.time())
        final = "FAILED" if "-fail" in jid else FINAL
        status = final if time.time() - t0 >= RUN else "RUNNING"
        now = int(time.time() * 1000)
        self._json(200, {
            "job_id": jid, "submission_id": jid, "status": status, "entrypoint": "fake",
            "message": "fake dashboard (grpo-launcher local cluster)", "start_time": int(t0 * 1000),
            "end_time": now if status != "RUNNING" else 0, "metadata": {}, "runtime_env": {},
        })

    def do_POST(self):  # noqa: N802  POST /api/jobs/ (HTTPMode submit) or POST /api/jobs/<id>/stop
        if self._forward():
            return
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b"{}"
        if self.path.rstrip("/").endswith("/stop"):
            return self._json(200, {"stopped": True})
        try:
            sid = json.loads(body or b"{}").get("submission_id") or "raysubmit_fake"
        except ValueError:
            sid = "raysubmit_fake"
        self._json(200, {"job_id": sid, "submission_id": sid})

    def do_DELETE(self):  # noqa: N802
        if self._forward():
            return
        self._json(200, {"deleted": True})

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), fmt % args))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    Server(("127.0.0.1", PORT), Handler).serve_forever()
