#!/usr/bin/env python3
"""Fake Ray dashboard, used as the KubeRay operator's HTTP_PROXY.

Usage: fake_ray_dashboard.py PORT [RUN_SECONDS] [FINAL_STATUS]

The operator's dashboard client is a plain net/http client, so with HTTP_PROXY=http://127.0.0.1:PORT every
request to http://<head-svc>.<ns>.svc.cluster.local:8265/... arrives here as an absolute-URI request.
GET /api/jobs/<id> answers RUNNING for RUN_SECONDS after the first poll of that id, then FINAL_STATUS.
The proxy only sees the URL, so the one per-job knob is the job id: KubeRay derives it from the RayJob name
(<name>-<suffix>), so a RayJob whose name contains "-fail" ends FAILED.
"""
import http.server
import json
import re
import socketserver
import sys
import time

PORT = int(sys.argv[1])
RUN = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
FINAL = sys.argv[3] if len(sys.argv) > 3 else "SUCCEEDED"
first_seen: dict[str, float] = {}


class Handler(http.server.BaseHTTPRequestHandler):
    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
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
        self._json(200, {"deleted": True})

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), fmt % args))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    Server(("127.0.0.1", PORT), Handler).serve_forever()
