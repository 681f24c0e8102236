"""`MetricsSink`: parsed step records -> `metrics.jsonl`, `metrics.csv`, `metrics.meta.json` in a run dir.

File contract (see ARCHITECTURE.md "Run directory"):

- `metrics.jsonl` is the source of truth: one strictly valid JSON object per logged step,
  `{"step": N, "<verl key>": value, ...}`, keys exactly verl's, in verl's order. Rows are appended
  as they arrive, each batch as whole lines in one `write` followed by `fsync`, so a crash leaves at
  most one torn last line, which the next `MetricsSink` on the same dir cuts off.
- **Non-finite values**: NaN, inf and -inf are written as JSON `null` (what verl's own FileLogger
  does via orjson), because `NaN`/`Infinity` are not JSON and break strict readers. The exact value is
  kept in `metrics.meta.json` under `nonfinite` (`{"<step>": {"<key>": "nan" | "inf" | "-inf"}}`),
  and `metrics.csv` writes `nan`/`inf`/`-inf` in those cells, which pandas and numpy read back as
  floats. A missing key is an empty CSV cell; an explicit null never occurs otherwise.
- **De-duplication**: a step already stored with identical values is ignored (re-attach, launcher
  restart). A step logged again with *different* values (a restarted container resumed from a
  checkpoint) replaces the stored row if it comes from the same or a later attempt; the file is
  then rewritten atomically (temp file + fsync + rename) with the new row in the old row's place,
  and `meta["relogged"]` records `{step, previous_attempt, attempt}`. A differing row from an
  *earlier* attempt (re-reading an old container's log) is ignored and counted as `stale`.
- **Attempts** are opaque ids (`int` or `str`) supplied by the caller, e.g. the container's
  `restartCount` or `f"{pod_uid}/{restart_count}"`. Two ints compare numerically; two strings that
  both begin with an RFC 3339 time (the follower's `<pod created>/<first line ns>/<uid>/<restart>`, so a pod recreated
  after an eviction or node loss is later than the one it replaces) compare as text; otherwise the
  attempt first seen later (persisted order in `meta["attempts"]`) is the later one.
- `metrics.csv` (union of columns, first-seen order, `step` first) and `metrics.meta.json` are
  derived files, written atomically (temp + rename) at `close()`, after any rewrite, and at most
  every `derived_interval_s` seconds while rows arrive. Both can be regenerated from the JSONL
  (plus meta's `nonfinite`), so a crash only makes them lag.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from launcher.metrics.parser import ParseCounters, StepRecord

JSONL = "metrics.jsonl"
CSV = "metrics.csv"
META = "metrics.meta.json"

Attempt = int | str
_TIMED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")  # an attempt id that starts with its time
_NONFINITE_TEXT = {math.inf: "inf", -math.inf: "-inf"}


def _nonfinite_text(v: float) -> str:
    return "nan" if v != v else _NONFINITE_TEXT[v]


def encode_row(step: int, metrics: dict) -> tuple[str, dict[str, str]]:
    """The JSONL line (no newline) for a row, and its non-finite cells as `{key: "nan"|"inf"|"-inf"}`."""
    row: dict = {"step": step}
    nonfinite: dict[str, str] = {}
    for k, v in metrics.items():
        if k == "step":
            continue  # would shadow the row's step; verl never logs such a key
        if type(v) is float and not math.isfinite(v):
            nonfinite[k] = _nonfinite_text(v)
            v = None
        row[k] = v
    return json.dumps(row, ensure_ascii=False, allow_nan=False, separators=(", ", ": ")), nonfinite


def _atomic_write(path: Path, write) -> None:
    """Write via `write(fileobj)` into a temp file next to `path`, fsync, rename over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


class MetricsSink:
    """Append-only, de-duplicating writer of the three metrics files in `run_dir`.

    Reopening the same `run_dir` (launcher restart) loads the stored steps, so nothing is written
    twice. Use as a context manager or call `close()` to write the derived files.
    """

    def __init__(self, run_dir: str | os.PathLike, *, derived_interval_s: float = 10.0, fsync: bool = True):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.dir / JSONL
        self.csv_path = self.dir / CSV
        self.meta_path = self.dir / META
        self.derived_interval_s = derived_interval_s
        self.fsync = fsync
        # step -> (attempt, digest of the row); digest compares values without keeping them
        self._index: dict[int, tuple[Attempt | None, int]] = {}
        self._columns: dict[str, None] = {"step": None}  # ordered set
        self._nonfinite: dict[int, dict[str, str]] = {}
        self._attempts: list[Attempt] = []
        self._relogged: list[dict] = []
        self._counters = ParseCounters()
        self._counter_sources: dict[str, ParseCounters] = {}
        self._stats = {"rows_written": 0, "duplicates": 0, "stale": 0, "torn_lines_recovered": 0, "corrupt_rows": 0}
        # Counted from opening: the first refresh comes one interval after the sink starts (monotonic()
        # is seconds since boot, so 0.0 here would make "one interval" depend on the uptime).
        self._last_derived = time.monotonic()
        self._dirty = False
        self._load()
        self._fd = os.open(self.jsonl_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # -- public -------------------------------------------------------------------------------

    def add(self, record: StepRecord, attempt: Attempt = 0) -> bool:
        """Store one record; True if it was new or replaced a stored row."""
        return self.add_many([record], attempt) > 0

    def add_many(self, records, attempt: Attempt = 0) -> int:
        """Store records from one attempt; one write + fsync for the new rows. Returns rows written."""
        if attempt not in self._attempts:
            self._attempts.append(attempt)
            self._dirty = True
        new_lines: list[str] = []
        batch_steps: set[int] = set()  # steps appended by this batch (not yet on disk)
        replaced: dict[int, str] = {}
        for rec in records:
            line, nonfinite = encode_row(rec.step, rec.metrics)
            digest = hash((line, tuple(sorted(nonfinite.items()))))
            old = self._index.get(rec.step)
            if old is not None:
                if old[1] == digest:
                    self._stats["duplicates"] += 1
                    continue
                if not self._later_or_same(attempt, old[0]):
                    self._stats["stale"] += 1
                    continue
                self._relogged.append({"step": rec.step, "previous_attempt": old[0], "attempt": attempt})
                if rec.step in batch_steps:  # same step twice in this batch: replace before writing
                    new_lines = [ln for ln in new_lines if _step_of(ln) != rec.step]
                    new_lines.append(line)
                else:
                    replaced[rec.step] = line
            else:
                new_lines.append(line)
                batch_steps.add(rec.step)
            self._index[rec.step] = (attempt, digest)
            if nonfinite:
                self._nonfinite[rec.step] = nonfinite
            else:
                self._nonfinite.pop(rec.step, None)
            for k in rec.metrics:
                if k not in self._columns and k != "step":
                    self._columns[k] = None
            self._dirty = True
        if new_lines:
            self._append(new_lines)
        if replaced:
            self._rewrite(replaced)
        written = len(new_lines) + len(replaced)
        self._stats["rows_written"] += written
        if replaced or any(s in self._nonfinite for s in batch_steps):
            self._write_meta()  # the JSONL alone cannot restore these; do not let meta lag
        self._maybe_write_derived()
        return written

    def add_counters(self, counters: ParseCounters, source: str | None = None) -> None:
        """Report a parser's counters (lines seen, skipped, ...) for the totals kept in meta.

        Without `source` they are added once (call it when that parser is done). With `source`
        (e.g. `f"{pod}/{attempt}"`) the latest snapshot per source is kept, so a follower may call
        this after every delivery with the same, growing `LogParser.counters` without double counting.
        Totals accumulate across sessions on the same run dir (meta is reloaded on open).
        """
        if source is None:
            self._counters.add(counters)
        else:
            snap = ParseCounters()
            snap.add(counters)
            self._counter_sources[source] = snap
        self._dirty = True

    @property
    def steps(self) -> list[int]:
        """Stored step numbers, in file order."""
        return list(self._index)

    @property
    def counters(self) -> ParseCounters:
        """Parser totals: loaded from meta, plus everything reported with `add_counters`."""
        total = ParseCounters()
        total.add(self._counters)
        for c in self._counter_sources.values():
            total.add(c)
        return total

    def write_derived(self) -> None:
        """Regenerate `metrics.csv` and `metrics.meta.json` now."""
        self._write_csv()
        self._write_meta()
        self._last_derived = time.monotonic()
        self._dirty = False

    def close(self) -> None:
        """Write the derived files and close the JSONL."""
        if self._fd is not None:
            self.write_derived()
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> MetricsSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _later_or_same(self, new: Attempt, old: Attempt | None) -> bool:
        if old is None or new == old:
            return True
        if type(new) is int and type(old) is int:
            return new > old
        if type(new) is str and type(old) is str and _TIMED.match(new) and _TIMED.match(old):
            return new > old
        if old not in self._attempts:
            return True
        return self._attempts.index(new) > self._attempts.index(old)

    def _append(self, lines: list[str]) -> None:
        data = ("\n".join(lines) + "\n").encode("utf-8")
        # O_APPEND + one write of whole lines: readers never see a half row unless we crash mid-write
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.fsync:
            os.fsync(self._fd)

    def _rewrite(self, replaced: dict[int, str]) -> None:
        """Replace rows in place: stream the old file into a temp file, then rename it over."""
        os.close(self._fd)
        self._fd = None

        def write(out):
            with open(self.jsonl_path, encoding="utf-8", errors="replace") as src:
                for raw in src:
                    step = _step_of(raw)
                    out.write((replaced[step] + "\n") if step in replaced else raw)

        _atomic_write(self.jsonl_path, write)
        self._fd = os.open(self.jsonl_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _maybe_write_derived(self) -> None:
        if self._dirty and time.monotonic() - self._last_derived >= self.derived_interval_s:
            self.write_derived()

    def _write_csv(self) -> None:
        cols = list(self._columns)

        def write(out):
            w = csv.writer(out, lineterminator="\n")
            w.writerow(cols)
            if not self.jsonl_path.exists():
                return
            with open(self.jsonl_path, encoding="utf-8", errors="replace") as src:
                for raw in src:
                    try:
                        row = json.loads(raw)
                    except ValueError:
                        continue
                    nf = self._nonfinite.get(row.get("step"), {})
                    w.writerow([_csv_cell(row, c, nf) for c in cols])

        _atomic_write(self.csv_path, write)

    def _write_meta(self) -> None:
        meta = {
            "format": 1,
            "jsonl": JSONL,
            "nan_policy": "NaN/inf/-inf are null in metrics.jsonl; exact values in 'nonfinite'; "
            "metrics.csv writes nan/inf/-inf",
            "steps": len(self._index),
            "parser": self.counters.as_dict(),
            "sink": dict(self._stats),
            "attempts": list(self._attempts),
            "step_attempt": {str(s): a for s, (a, _) in self._index.items()},
            "relogged": self._relogged,
            "nonfinite": {str(s): v for s, v in self._nonfinite.items()},
        }
        _atomic_write(self.meta_path, lambda f: json.dump(meta, f, indent=1, ensure_ascii=False))

    def _load(self) -> None:
        """Load stored rows and meta; cut a torn last line left by a crash mid-write."""
        meta = {}
        if self.meta_path.exists():
            try:
                meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
            except (ValueError, OSError):
                meta = {}
        for k, v in (meta.get("parser") or {}).items():
            if hasattr(self._counters, k) and isinstance(v, int):
                setattr(self._counters, k, v)
        for k, v in (meta.get("sink") or {}).items():
            if k in self._stats and isinstance(v, int):
                self._stats[k] = v
        self._attempts = list(meta.get("attempts") or [])
        self._relogged = list(meta.get("relogged") or [])
        nonfinite = {int(s): v for s, v in (meta.get("nonfinite") or {}).items()}
        step_attempt = {int(s): a for s, a in (meta.get("step_attempt") or {}).items()}
        if not self.jsonl_path.exists():
            return
        good_end = 0
        with open(self.jsonl_path, "rb") as f:
            for raw in f:
                end = good_end + len(raw)
                if not raw.endswith(b"\n"):
                    break  # torn last line: no newline means the write never finished
                try:
                    row = json.loads(raw)
                    step = row.pop("step")
                    if type(step) is not int or not isinstance(row, dict):
                        raise ValueError
                except (ValueError, KeyError, AttributeError, TypeError):
                    self._stats["corrupt_rows"] += 1
                    good_end = end
                    continue
                nf = nonfinite.get(step, {})
                metrics = {k: float(nf[k]) if k in nf else v for k, v in row.items()}
                line, nf2 = encode_row(step, metrics)
                self._index[step] = (step_attempt.get(step), hash((line, tuple(sorted(nf2.items())))))
                if nf2:
                    self._nonfinite[step] = nf2
                for k in row:
                    self._columns.setdefault(k, None)
                good_end = end
        if good_end < self.jsonl_path.stat().st_size:
            os.truncate(self.jsonl_path, good_end)
            self._stats["torn_lines_recovered"] += 1
            self._dirty = True


def _step_of(line: str) -> int | None:
    """Step of a JSONL row we wrote (`{"step": N, ...`) without parsing the whole line."""
    if line.startswith('{"step": '):
        end = line.find(",", 9)
        num = line[9:end] if end > 0 else line[9:].rstrip("}\n ")
        if num.isdigit():
            return int(num)
    return None


def _csv_cell(row: dict, col: str, nonfinite: dict[str, str]) -> str:
    if col not in row:
        return ""
    v = row[col]
    if v is None:
        return nonfinite.get(col, "")
    return repr(v) if type(v) is float else str(v)
