"""Two pytest workers on the two real nodes at once, and what keeps them apart (issue 43 part 3).

`make test` runs the real-node tests on two workers (tests/conftest.py's scheduler): one runs every real verl
training run in turn (scope "realnode": ~9 GB each, one at a time), the other the tests whose pods are small (marker
`smallpods`: the smoke workload, plain pods; scope "realnode-smallpods"), beside them. The kube-scheduler keeps
their pods within the nodes' 2 CPUs each; what it cannot see is kept apart here, with one lock file:

- a `wholenodes` test (a run with a pod on each real node, which fills both nodes' CPUs, or one that edits the host's
  FORWARD chain, or whose kubelet log rotation must keep pace) holds it exclusively;
- a `smallpods` test holds it shared, so it never overlaps a `wholenodes` test and never starts while one waits
  (a waiting one leaves a file beside the lock: the training worker is CI's critical path and must not starve);
- every other real-node test (a one-node verl run) takes nothing: a smoke pod fits beside it.

A test marked both (doctor's blocked rendezvous: small pods, but a FORWARD rule no 2-node run may meet) runs on the
`smallpods` worker and holds the lock exclusively.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

import kwok_support as ks

POLL_S = 2.0


def _dir() -> Path:
    d = ks.cluster_dir() / "realnode-share"
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _locked(mode: int):
    with open(_dir() / "lock", "a+") as f:
        fcntl.flock(f, mode)  # no timeout: the holder is a test with its own hang guards
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _waiting() -> bool:
    """Does a live `whole_nodes` test wait or run? (a killed worker's file is not one)"""
    for f in _dir().glob("want-*"):
        try:
            os.kill(int(f.name.removeprefix("want-")), 0)
        except (ValueError, ProcessLookupError):
            f.unlink(missing_ok=True)
            continue
        except PermissionError:
            pass
        return True
    return False


@contextlib.contextmanager
def whole_nodes():
    """Both real nodes to this test alone (no `smallpods` test runs meanwhile)."""
    want = _dir() / f"want-{os.getpid()}"
    want.touch()
    try:
        with _locked(fcntl.LOCK_EX):
            yield
    finally:
        want.unlink(missing_ok=True)


@contextlib.contextmanager
def small_pods():
    """A small share of the real nodes: waits while a `whole_nodes` test runs or waits."""
    while True:
        while _waiting():
            time.sleep(POLL_S)
        with _locked(fcntl.LOCK_SH):
            if _waiting():  # one started waiting as this one took the lock: it goes first
                continue
            yield
            return
