"""Where a follower is in each log stream, saved so that a killed launcher resumes without duplicates.

Each stream (pod uid + container + restartCount, an *attempt*) keeps the timestamp of the last line handled
and the lines seen at exactly that timestamp (`Position`); `FollowState` saves every position together with
each raw log's byte length in `runs/<job>/logs/.follow-state.json` (see `launcher.run.follow`), and `lock`
keeps one follower per run directory.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from launcher.run.dirs import write_atomic

_TS = re.compile(rb"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")
STATE_VERSION = 1


def parse_ts(line: bytes) -> tuple[int, int] | None:
    """(epoch nanoseconds, length of the `<timestamp> ` prefix) of a `timestamps=true` log line."""
    m = _TS.match(line)
    if not m:
        return None
    import calendar

    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or b"").ljust(9, b"0")
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    tz = m.group(8)
    if tz != b"Z":
        sign = 1 if tz[:1] == b"+" else -1
        secs -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return secs * 1_000_000_000 + int(frac), m.end()


def format_since(ns: int) -> str:
    """RFC3339 for `sinceTime`, rounded down to the second (what the API keeps anyway)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // 1_000_000_000))


# --------------------------------------------------------------------------------------------------
# Persisted positions


@dataclass
class Position:
    """Where one attempt's stream stands: last timestamp and the lines already handled at it."""

    ns: int | None = None
    at_mark: Counter = field(default_factory=Counter)
    done: bool = False

    def to_json(self) -> dict:
        return {"ns": self.ns, "at_mark": dict(self.at_mark), "done": self.done}

    @classmethod
    def from_json(cls, d: dict) -> Position:
        return cls(d.get("ns"), Counter(d.get("at_mark") or {}), bool(d.get("done")))


class FollowState:
    """`.follow-state.json`: stream positions plus the raw-log lengths they correspond to."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.RLock()
        self.positions: dict[str, Position] = {}
        self.files: dict[str, int] = {}
        self._last_save = 0.0
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = {}
            self.positions = {k: Position.from_json(v) for k, v in (data.get("streams") or {}).items()}
            self.files = {k: int(v) for k, v in (data.get("files") or {}).items()}

    def restore_files(self, logs_dir: Path) -> None:
        """Cut each raw log back to its recorded length: bytes after it were never committed."""
        for name, size in self.files.items():
            p = logs_dir / name
            if p.exists() and p.stat().st_size > size:
                with open(p, "r+b") as f:
                    f.truncate(size)

    def position(self, key: str) -> Position:
        with self.lock:
            return self.positions.setdefault(key, Position())

    def save(self, force: bool = False, interval: float = 0.2, *, throttle: bool = True) -> None:
        """Write the state (at most every `interval` s unless `force`); `throttle=False` leaves the next
        throttled save free to happen at once (a registration must not delay the first delivery's save)."""
        with self.lock:
            now = time.monotonic()
            if not force and now - self._last_save < interval:
                return
            data = {"version": STATE_VERSION, "files": dict(self.files),
                    "streams": {k: p.to_json() for k, p in self.positions.items()}}
            write_atomic(self.path, json.dumps(data, indent=0, sort_keys=True))
            if throttle:
                self._last_save = now



def lock(path: Path) -> int:
    """One follower per run directory: two would cut each other's raw logs back on start."""
    import fcntl
    import os

    from launcher.errors import BadInput

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BadInput(f"another launcher is already following this run (lock {path}); stop it first") from None
    return fd


class Resent:
    """What one attach's answer repeats: it starts at the mark's whole second (`sinceTime`), so its first lines up to
    the mark were handled before. Lines come in file order, but their stamps need not rise: the runtime stamps
    stdout and stderr in a goroutine each and writes whichever comes first, so an `[eval] model=...` line on stdout
    can follow, stamped microseconds earlier, a stderr line (the likely loss of a result in CI, 2026-12-05). So a
    stamp below the mark means "resent" only before the answer passes the mark; after that, every line is new.
    (One line stamped below the mark and written after it, when a cut fell between the two, is still taken for
    resent; without a record of every line handled, nothing tells it apart.)"""

    def __init__(self, mark: int | None, at_mark: Counter):
        self.mark = mark
        self.at_mark = at_mark  # the lines handled at the mark, each sent again once
        self.past = mark is None  # beyond what was handled: nothing more to drop

    def again(self, ns: int, text: str) -> bool:
        """Whether this line (in answer order) was handled on an earlier attach."""
        if self.past:
            return False
        if ns < self.mark:
            return True
        if ns == self.mark and self.at_mark[text] > 0:
            self.at_mark[text] -= 1
            return True
        self.past = True
        return False
