"""Live export while following a run: the follower's new steps go to MLflow / TensorBoard as they arrive.

The follower writes each batch of parsed steps to `metrics.jsonl` first and then calls
`on_records`; this re-reads the file (the source of truth, de-duplicated) at most every
`interval_s` seconds and sends only what the exporters have not sent. `finish()` sends the rest and
the report's summary figures. An exporter error is reported once and retried at the next batch: the
follow itself never fails because a tracking server is away (`launcher export` can catch up later).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from launcher.export.source import load_run_data


class LiveExport:
    """Drives the exporters from the follower's callbacks."""

    def __init__(self, run_dir: str | Path, *, mlflow: str | None = None, mlflow_experiment: str | None = None,
                 tensorboard: str | None = None, interval_s: float = 2.0,
                 on_notice: Callable[[str], None] = lambda m: None):
        from launcher.export import targets

        self.run_dir = Path(run_dir)
        self.exporters = targets.open_exporters(mlflow=mlflow, mlflow_experiment=mlflow_experiment,
                                                tensorboard=tensorboard)
        self.interval_s = interval_s
        self.on_notice = on_notice
        self._last = 0.0
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.sent = 0

    def on_records(self, records) -> None:
        """The follower's `on_records` hook (called after the records reached metrics.jsonl)."""
        if time.monotonic() - self._last >= self.interval_s:
            self.sync(summary=False)

    def sync(self, *, summary: bool) -> None:
        with self._lock:
            self._last = time.monotonic()
            if not (self.run_dir / "metrics.jsonl").is_file():
                return
            try:
                data = load_run_data(self.run_dir, summary=summary)
            except Exception as exc:  # nothing readable yet
                self._warn("source", f"export: {exc}")
                return
            for name, exporter in self.exporters.items():
                try:
                    self.sent += exporter.export(data).sent
                except Exception as exc:
                    self._warn(name, f"warning: export to {name} failed ({exc}); retrying with the next steps "
                               f"(`launcher export {self.run_dir}` catches up later)")

    def _warn(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.on_notice(msg)

    def finish(self) -> None:
        """Send everything left, with the report's summary figures, and close the writers."""
        self.sync(summary=True)
        for exporter in self.exporters.values():
            close = getattr(exporter, "close", None)
            if close:
                close()
