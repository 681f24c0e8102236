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


def _file(name: str) -> property:
    """A path under the run directory, as a read-only attribute."""
    return property(lambda self: self.path / name, doc=f"`<run dir>/{name}`")


@dataclass(frozen=True)
class RunDir:
    """Paths of one run's files (nothing is created until `ensure`)."""

    path: Path

    @classmethod
    def of(cls, job: str, runs_dir: str | None = None) -> RunDir:
        return cls(runs_root(runs_dir) / job)

    spec = _file("spec.yaml")
    manifests = _file("manifests.yaml")
    logs = _file("logs")
    # what ran and what the watchdog saw (launcher.run.provenance, launcher.run.watchdog)
    findings = _file("findings.jsonl")
    watched = _file("watchdog.json")  # what the follower's watchdog judged: steps seen, checks on (Watchdog.watched)
    provenance = _file("provenance.json")
    images = _file("images.json")
    verl_config = _file("verl_config.json")
    incidents = _file("incidents")  # one directory per stall the watchdog captured (launcher.run.incidents)

    @property
    def follow_state(self) -> Path:
        """Per-stream resume positions of the log follower (see `launcher.run.logpos`)."""
        return self.logs / ".follow-state.json"

    def pod_log(self, pod: str) -> Path:
        return self.logs / f"{pod}.log"

    def saved_spec(self) -> dict:
        """The run's spec.yaml as data; {} when it has none or it cannot be read."""
        import yaml

        try:
            return yaml.safe_load(self.spec.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            return {}

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
