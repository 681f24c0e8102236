"""Copying local files into a running pod through the API server (`launcher data put`), resumably and verified.

Nothing but `create pods/exec` on the pod: no registry, no object store, no kubectl, no tar in the image. Two
small programs run with the image's python3 (argv, never a shell):

- `SURVEY DIR NAME...` prints, for each name, the size and sha256 of `DIR/NAME` and of `DIR/NAME.part` (or null).
- `RECEIVE PATH OFFSET` cuts `PATH.part` to OFFSET bytes, then appends the base64 lines it reads on stdin; on
  `END <size> <sha256>` it checks the whole `.part` against them, fsyncs it and renames it to PATH, printing
  `OK <size> <sha256>`; a mismatch prints `BAD <size> <sha256>` and exits 1. A stream that ends before END (the
  launcher killed, the connection lost) leaves the `.part`, whose bytes are always a prefix of what was sent.

`put_files` surveys first: a file already there with the same sha256 is skipped, a `.part` whose bytes match the
start of the local file resumes after them, anything else is sent again from byte 0. base64 lines keep every
websocket frame text, which every supported client version writes the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ClusterError
from launcher.kube.pod_exec import finish, run_exec

CHUNK = 1 << 20  # raw bytes per base64 line

SURVEY = r"""
import hashlib, json, os, sys
def info(path):
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return [os.path.getsize(path), digest.hexdigest()]
d = sys.argv[1]
print(json.dumps({n: {"final": info(os.path.join(d, n)), "part": info(os.path.join(d, n + ".part"))}
                  for n in sys.argv[2:]}))
"""

RECEIVE = r"""
import base64, hashlib, os, sys
path, offset = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.dirname(path), exist_ok=True)
part = path + ".part"
with open(part, "r+b" if os.path.exists(part) else "w+b") as f:
    f.truncate(offset)
    f.seek(offset)
    while True:
        line = sys.stdin.buffer.readline()
        if not line.endswith(b"\n"):
            sys.exit("the stream ended before END: " + part + " kept for a resume")
        if line.startswith(b"END "):
            _, size, expected = line.split()
            break
        f.write(base64.b64decode(line))
    f.flush()
    os.fsync(f.fileno())
digest = hashlib.sha256()
with open(part, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
got = (os.path.getsize(part), digest.hexdigest())
if got != (int(size), expected.decode()):
    print("BAD", *got)
    sys.exit(1)
os.replace(part, path)
fd = os.open(os.path.dirname(path), os.O_RDONLY)
os.fsync(fd)
os.close(fd)
print("OK", *got)
"""


@dataclass(frozen=True)
class LocalFile:
    """A file to put: its path here, size and sha256."""

    path: Path
    size: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> LocalFile:
        return cls(path, path.stat().st_size, sha256_prefix(path, None))


@dataclass(frozen=True)
class Sent:
    """What happened to one file: `skipped` (already there, same sha256), or sent from byte `offset`."""

    name: str
    size: int
    sha256: str
    skipped: bool
    offset: int = 0

    def line(self) -> str:
        if self.skipped:
            return f"{self.name}: already there ({self.size} bytes, sha256 {self.sha256[:12]}), skipped"
        how = f"resumed at byte {self.offset}" if self.offset else "sent"
        return f"{self.name}: {how}; {self.size} bytes verified on arrival (sha256 {self.sha256[:12]})"


def sha256_prefix(path: Path, size: int | None) -> str:
    """sha256 of the first `size` bytes of `path` (all of it for None)."""
    digest = hashlib.sha256()
    left = path.stat().st_size if size is None else size
    with path.open("rb") as f:
        while left > 0:
            block = f.read(min(CHUNK, left))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def put_files(kube, pod: str, files: list[LocalFile], dest_dir: str, *, container: str | None = None,
              on_bytes: Callable[[int], None] = lambda n: None, timeout: float = 600) -> list[Sent]:
    """Put `files` into `dest_dir` in `pod` (running), each verified on arrival; resumable (see the module)."""
    survey = json.loads(_run(kube, pod, ["python3", "-c", SURVEY, dest_dir, *(f.path.name for f in files)],
                             container=container, timeout=timeout))
    out = []
    for f in files:
        there = survey[f.path.name]
        if there["final"] == [f.size, f.sha256]:
            on_bytes(f.size)
            out.append(Sent(f.path.name, f.size, f.sha256, skipped=True))
            continue
        part = there["part"]
        offset = part[0] if part and part[0] <= f.size and part[1] == sha256_prefix(f.path, part[0]) else 0
        on_bytes(offset)
        _send(kube, pod, f, f"{dest_dir}/{f.path.name}", offset, container=container, on_bytes=on_bytes,
              timeout=timeout)
        out.append(Sent(f.path.name, f.size, f.sha256, skipped=False, offset=offset))
    return out


def _send(kube, pod: str, f: LocalFile, dest: str, offset: int, *, container, on_bytes, timeout) -> None:
    import base64

    session = kube.exec(pod, ["python3", "-c", RECEIVE, dest, str(offset)], container=container)
    try:
        with f.path.open("rb") as src:
            src.seek(offset)
            for block in iter(lambda: src.read(CHUNK), b""):
                session.write_stdin(base64.b64encode(block).decode("ascii") + "\n")
                on_bytes(len(block))
        session.write_stdin(f"END {f.size} {f.sha256}\n")
        out, err, code = finish(session, timeout)
    finally:
        session.close()
    if code != 0 or not out.startswith("OK "):
        detail = out.strip() or err.strip() or f"exit {code}"
        if out.startswith("BAD "):
            _, size, digest = out.split()[:3]
            detail = f"arrived as {size} bytes, sha256 {digest[:12]}; sent {f.size} bytes, sha256 {f.sha256[:12]}"
        raise ClusterError(f"{f.path.name}: not verified on arrival in pod {pod} ({detail}); run `data put` again "
                           "to resume")


def _run(kube, pod: str, argv: list[str], *, container, timeout: float) -> str:
    out, err, code = run_exec(kube, pod, argv, container=container, timeout=timeout)
    if code != 0:
        raise ClusterError(f"{argv[0]} in pod {pod} exited {code}: {err.strip() or out.strip()}")
    return out
