"""Running a command in a pod to its end over an exec session (`Kube.exec`, the client's websocket): what
`Kube.run_in_pod`, `launcher data put` and the incident capture share."""

from __future__ import annotations

import time

from launcher.errors import ClusterError


def run_exec(kube, pod: str, argv: list[str], *, container: str | None = None,
             timeout: float = 600) -> tuple[str, str, int | None]:
    """`Kube.run_in_pod` for anything with an `exec` like `Kube.exec` (the tests' stand-in pods offer only that)."""
    session = kube.exec(pod, argv, container=container)
    try:
        return finish(session, timeout)
    finally:
        session.close()


def finish(session, timeout: float) -> tuple[str, str, int | None]:
    """Read an exec session (`Kube.exec`) to its end: (stdout, stderr, exit code; None if the server did not say)."""
    out, err = [], []
    deadline = time.monotonic() + timeout
    while session.is_open():
        if time.monotonic() > deadline:
            raise ClusterError(f"no answer from the pod within {timeout:g}s")
        session.update(timeout=1)
        if session.peek_stdout():
            out.append(session.read_stdout())
        if session.peek_stderr():
            err.append(session.read_stderr())
    out.append(session.read_stdout() if session.peek_stdout() else "")
    err.append(session.read_stderr() if session.peek_stderr() else "")
    try:
        code = session.returncode
    except ValueError as exc:  # the error channel held a failure, not an exit status (e.g. no container to exec in)
        raise ClusterError(f"exec failed: {str(exc).partition(': ')[2].strip(chr(39)) or exc}") from None
    return "".join(out), "".join(err), code
