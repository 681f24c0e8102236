"""A git server on loopback for the GitOps tests: git's own smart-HTTP CGI (`git http-backend`) behind Python's
threading HTTP server, so Flux's source-controller clones and the tests push with plain `git` over HTTP.

    python3 git_server.py ROOT PORT     serves every bare repository under ROOT at http://127.0.0.1:PORT/<name>.git

Pushes are allowed without authentication (`http.receivepack` on): it listens on 127.0.0.1 only and holds test
repositories. `GET /healthz` answers 200 (up.sh's readiness probe).
"""

from __future__ import annotations

import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

BACKEND = "/usr/lib/git-core/git-http-backend"


class GitHandler(BaseHTTPRequestHandler):
    root = "."
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # one line per request, to the log up.sh keeps
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _cgi(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._reply(200, {"Content-Type": "text/plain"}, b"ok\n")
            return
        body = self._body() if self.command == "POST" else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.root, "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.receivepack", "GIT_CONFIG_VALUE_0": "true",
            "REQUEST_METHOD": self.command, "PATH_INFO": url.path, "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0], "REMOTE_USER": "grpo-e2e",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
        }
        proc = subprocess.run([BACKEND], input=body, capture_output=True, env=env, timeout=300)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers[key.strip()] = value.strip()
        if proc.returncode != 0 and status == 200:
            status, payload = 500, proc.stderr
        self._reply(status, headers, payload)

    def _reply(self, status: int, headers: dict, payload: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _cgi


def main() -> None:
    root, port = sys.argv[1], int(sys.argv[2])
    os.makedirs(root, exist_ok=True)
    GitHandler.root = os.path.abspath(root)
    ThreadingHTTPServer(("127.0.0.1", port), GitHandler).serve_forever()


if __name__ == "__main__":
    main()
