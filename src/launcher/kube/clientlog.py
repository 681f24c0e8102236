"""The Kubernetes client's and urllib3's own log records, kept off stderr.

Both log through `logging`: urllib3 warns "Retrying (Retry(total=0, ...)) after connection broken by
..." before every retry, and the kubeconfig loader calls the *root* logger (`logging.error(str(e))`)
when an exec credential plugin fails, then carries on without credentials. With no handler
configured, Python prints WARNING and above raw on stderr (`logging.lastResort`), next to the
launcher's own one-line error. `client_log()` collects those records instead; `Kube` turns an exec
plugin's error into part of its one-line error and drops the retry chatter (the final error says why).
"""

from __future__ import annotations

import collections
import logging
import os
import threading

# Loggers the client stack logs to by name (urllib3.connectionpool, kubernetes.client.rest, ...).
LOGGERS = ("urllib3", "kubernetes")

_lock = threading.Lock()
_installed: ClientLog | None = None


class ClientLog(logging.Handler):
    """Keeps the last WARNING-and-above records of the client stack; nothing reaches stderr."""

    def __init__(self, keep: int = 50):
        super().__init__(logging.WARNING)
        self.records: collections.deque[logging.LogRecord] = collections.deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take_errors(self) -> str:
        """The ERROR-and-above messages collected since the last call, on one line ('' when none)."""
        with _lock:
            errors = [r for r in self.records if r.levelno >= logging.ERROR]
            self.records.clear()
        return "; ".join(" ".join(r.getMessage().split()) for r in errors)


class _FromClientCode(logging.Filter):
    """On the root logger: divert records logged from the kubernetes package's files to the collector."""

    def __init__(self, sink: ClientLog, package_dir: str):
        super().__init__()
        self.sink, self.package_dir = sink, package_dir

    def filter(self, record: logging.LogRecord) -> bool:
        if record.pathname.startswith(self.package_dir):
            if record.levelno >= self.sink.level:
                self.sink.emit(record)
            return False
        return True


def client_log() -> ClientLog:
    """The process-wide collector, installed once (loggers are process-wide; a second install would double it)."""
    global _installed
    with _lock:
        if _installed is None:
            import kubernetes

            sink = ClientLog()
            for name in LOGGERS:
                lg = logging.getLogger(name)
                lg.addHandler(sink)
                lg.propagate = False  # never to the root logger, whose last-resort handler prints raw lines
            package_dir = os.path.dirname(os.path.abspath(kubernetes.__file__)) + os.sep
            logging.getLogger().addFilter(_FromClientCode(sink, package_dir))
            _installed = sink
        return _installed
