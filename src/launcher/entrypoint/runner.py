"""Child processes of the entrypoint: verl's trainer and `ray start --block`.

A child runs in its own process group (its own session), inherits stdout/stderr (so its output
reaches the pod log live) and gets `PYTHONUNBUFFERED=1`. With `tail`, its stderr goes through a pipe that a
thread copies byte for byte to the entrypoint's stderr as it arrives, keeping the last lines in `tail` (why it
failed: `launcher.entrypoint.failure`). SIGTERM/SIGINT sent to the entrypoint
(kubelet stopping the pod, Ctrl-C) are forwarded to the child's whole group; if the group is still
alive `grace_s` seconds later it gets SIGKILL. The exit status follows the shell convention: the
child's code, or 128+N when signal N killed it.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The pods get terminationGracePeriodSeconds=120; keep SIGKILL of the child inside it.
DEFAULT_GRACE_S = 100.0


def log(message: str) -> None:
    """One `[entrypoint]` line on stderr, flushed at once."""
    print(f"[entrypoint] {message}", file=sys.stderr, flush=True)


def exit_status(returncode: int) -> int:
    """Popen's returncode (negative for a signal) as a shell exit status (128+N)."""
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """One child process in its own process group, with a grace period between SIGTERM and SIGKILL."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, name: str = "child",
                 grace_s: float = DEFAULT_GRACE_S, cwd: str | None = None, tail: collections.deque | None = None):
        self.tail = tail
        self._copier: threading.Thread | None = None
        self.argv = list(argv)
        self.env = {**env, "PYTHONUNBUFFERED": "1"}
        self.name = name
        self.grace_s = grace_s
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.signalled: int | None = None  # the first signal forwarded to the group
        self._kill_at: float | None = None

    def start(self) -> "Child":
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, start_new_session=True,
                                     stderr=subprocess.PIPE if self.tail is not None else None)
        if self.tail is not None:
            self._copier = threading.Thread(target=_copy_stderr, args=(self.proc.stderr.fileno(), self.tail),
                                            name=f"{self.name}-stderr", daemon=True)
            self._copier.start()
        return self

    def drain(self, timeout: float = 5.0) -> None:
        """Wait (at most `timeout`) for the stderr copy to reach the end: the tail then holds the last lines."""
        if self._copier is not None:
            self._copier.join(timeout)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "child not started"
        return self.proc.pid

    def _killpg(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        """Send `signum` to the child's group and arm the SIGKILL deadline (once)."""
        if self.proc is None:
            return
        if self.signalled is None:
            self.signalled = signum
            self._kill_at = time.monotonic() + self.grace_s
        self._killpg(signum)

    def poll(self) -> int | None:
        """The exit status if the child ended (its group is then reaped too), else None.

        Also enforces the grace period: past it, the group gets SIGKILL.
        """
        assert self.proc is not None, "child not started"
        code = self.proc.poll()
        if code is None:
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                log(f"{self.name} still running {self.grace_s:g}s after signal {self.signalled}: SIGKILL")
                self._killpg(signal.SIGKILL)
                self._kill_at = None
            return None
        # The leader is gone; grandchildren (Ray daemons, dataloader workers) must not outlive it.
        self._killpg(signal.SIGKILL)
        return exit_status(code)

    def wait(self, timeout: float | None = None, poll_s: float = 0.1) -> int | None:
        """Wait for the child (None on timeout), letting signal handlers and the grace deadline run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)

    def stop(self, timeout: float | None = None) -> int:
        """SIGTERM, wait up to `timeout` (default: the grace period), then SIGKILL; the exit status."""
        if self.proc is None:
            return 0
        code = self.proc.poll()
        if code is not None:
            self._killpg(signal.SIGKILL)
            return exit_status(code)
        self.terminate(signal.SIGTERM)
        code = self.wait(self.grace_s if timeout is None else timeout)
        if code is None:
            self._killpg(signal.SIGKILL)
            code = exit_status(self.proc.wait())
        return code


def _copy_stderr(fd: int, tail: collections.deque) -> None:
    """Copy `fd` to our stderr as it arrives (bytes as written: tqdm's \r, partial lines), keeping its lines."""
    pending = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            break
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(2, view):]
            except InterruptedError:
                continue
            except OSError:  # our stderr is gone: keep reading so the child never blocks on a full pipe
                break
        *lines, pending = (pending + data).split(b"\n")
        tail.extend(line.decode("utf-8", "replace")[-2000:] for line in lines)
        pending = pending[-8192:]
    if pending:
        tail.append(pending.decode("utf-8", "replace")[-2000:])


class SignalState:
    """Signals the entrypoint received while forwarding (the first one decides the exit status)."""

    def __init__(self) -> None:
        self.received: int | None = None


@contextmanager
def forward_signals(children: "list[Child]", state: SignalState | None = None) -> Iterator[SignalState]:
    """While inside, SIGTERM/SIGINT go to the process group of every started child in `children`.

    `children` is read when a signal arrives, so a caller may add children inside the block; one
    started after a signal was recorded must be terminated by the caller (`state.received`).
    """
    state = state or SignalState()

    def handler(signum, _frame):
        if state.received is None:
            state.received = signum
            log(f"received signal {signum}; forwarding it to the child process group(s)")
        for child in list(children):
            if child.proc is not None:
                child.terminate(signum)

    previous = {s: signal.signal(s, handler) for s in FORWARDED_SIGNALS}
    try:
        yield state
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_child(argv: Sequence[str], env: Mapping[str, str], *, name: str = "child",
              grace_s: float = DEFAULT_GRACE_S, cwd: str | None = None, tail: collections.deque | None = None) -> int:
    """Run `argv` to completion with signal forwarding; its exit status (128+N if killed by signal N). With `tail`,
    its last stderr lines (see the module)."""
    child = Child(argv, env, name=name, grace_s=grace_s, cwd=cwd, tail=tail)
    with forward_signals([child]) as state:
        child.start()
        if state.received is not None:  # arrived before the child existed
            child.terminate(state.received)
        code = child.wait()
    child.drain()
    assert code is not None
    return code
