"""The run directory: `runs/<job-name>/` (ARCHITECTURE.md "Run directory").

The root is `--runs-dir`, else `$LAUNCHER_RUNS_DIR`, else `./runs`. Every verb that writes files for
a run goes through `RunDir`, so the layout is declared once.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

ENV = "LAUNCHER_RUNS_DIR"
DEFAULT = "runs"


def runs_root(arg: str | None = None) -> Path:
    """`--runs-dir`, `$LAUNCHER_RUNS_DIR`, or `./runs`."""
    return Path(arg or os.environ.get(ENV) or DEFAULT)


@dataclass(frozen=True)
class RunDir:
    """Paths of one run's files (nothing is created until `ensure`)."""

    path: Path

    @classmethod
    def of(cls, job: str, runs_dir: str | None = None) -> RunDir:
        return cls(runs_root(runs_dir) / job)

    @property
    def spec(self) -> Path:
        return self.path / "spec.yaml"

    @property
    def manifests(self) -> Path:
        return self.path / "manifests.yaml"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def follow_state(self) -> Path:
        """Per-stream resume positions of the log follower (see `launcher.run.follow`)."""
        return self.logs / ".follow-state.json"

    # what ran and what the watchdog saw (launcher.run.provenance, launcher.run.watchdog)
    @property
    def findings(self) -> Path:
        return self.path / "findings.jsonl"

    @property
    def provenance(self) -> Path:
        return self.path / "provenance.json"

    @property
    def images(self) -> Path:
        return self.path / "images.json"

    @property
    def verl_config(self) -> Path:
        return self.path / "verl_config.json"

    def pod_log(self, pod: str) -> Path:
        return self.logs / f"{pod}.log"

    def ensure(self) -> RunDir:
        self.logs.mkdir(parents=True, exist_ok=True)
        return self

    def write_text(self, path: Path, text: str) -> None:
        """Atomic write (temp file + rename): a reader never sees half a spec or manifest."""
        write_atomic(path, text)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
