"""Reading a run directory: `metrics.jsonl` rows, the optional `spec.yaml` and `pods.json`.

The loader is forgiving about content (a malformed line, a duplicated step, a non-numeric value are
noted and skipped) and strict about existence (no run directory, no `metrics.jsonl`, or nothing
readable in it raise `BadInput`, exit 2), so the report can always say what it could not compute.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.run import placement
from launcher.errors import BadInput

METRICS_FILE = "metrics.jsonl"
SPEC_FILE = "spec.yaml"
META_FILE = "metrics.meta.json"

# verl's validation metrics live under these prefixes (`val-core/...`, `val-aux/...`); `timing_s/testing`
# is the validation timer. A row carrying only these is a validation row, not a training step.
VALIDATION_PREFIXES = ("val-",)
VALIDATION_KEYS = frozenset({"timing_s/testing"})


@dataclass
class Run:
    """One run directory, loaded.

    `rows` are sorted by step; each maps a verl key to a float (JSON null becomes NaN; strings and
    booleans are dropped because they are not metrics). `notes` say what was skipped and why.
    """

    path: Path
    name: str
    rows: list[dict[str, float]]
    spec: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    # `pods.json` (launcher.run.placement): each pod's node and whether it is a KWOK fake; None when absent
    pods: dict[str, dict[str, Any]] | None = None

    @property
    def training_rows(self) -> list[dict[str, float]]:
        """Rows that carry training metrics (verl's step-0 validation row is not a training step)."""
        return [r for r in self.rows if is_training_row(r)]

    @property
    def validation_rows(self) -> list[dict[str, float]]:
        """Rows that carry at least one validation (`val-*`) key."""
        return [r for r in self.rows if any(is_validation_key(k) for k in r)]


def is_validation_key(key: str) -> bool:
    """True for verl's validation metrics (`val-core/...`, `val-aux/...`, `timing_s/testing`)."""
    return key.startswith(VALIDATION_PREFIXES) or key in VALIDATION_KEYS


def is_training_row(row: dict[str, float]) -> bool:
    """A training step carries at least one metric outside the validation namespaces."""
    return any(k != "step" and not is_validation_key(k) for k in row)


def resolve_run_dir(arg: str | os.PathLike[str]) -> Path:
    """The run directory for a CLI argument: a path, or a job name under the runs directory.

    A name that is not an existing path is looked up under `$LAUNCHER_RUNS_DIR` (default `runs/`),
    matching where `submit` and `metrics` write (ARCHITECTURE.md, "Run directory").
    """
    path = Path(arg)
    if path.is_dir():
        return path
    runs_dir = Path(os.environ.get("LAUNCHER_RUNS_DIR", "runs"))
    candidate = runs_dir / str(arg)
    if not path.is_absolute() and candidate.is_dir():
        return candidate
    where = "" if path.is_absolute() else f" (nor {candidate})"
    raise BadInput(f"run directory {str(arg)!r} does not exist{where}")


def _to_float(value: Any) -> float | None:
    """A metric value as float: null -> NaN; bool, str, dict, list -> None (not a metric)."""
    if value is None:
        return math.nan
    # bool is an int subclass; verl's console drops bools, so the report does too.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_metrics(lines: list[str], source: str = METRICS_FILE) -> tuple[list[dict[str, float]], list[str]]:
    """Parse `metrics.jsonl` lines into rows sorted by step, plus notes on what was skipped.

    Accepts the launcher's flat form `{"step": N, "<key>": v, ...}` and verl's own FileLogger form
    `{"step": N, "data": {...}}`. Two lines for the same step are merged, the later value winning,
    because a restarted attempt re-logs a step and its newer value is the one that trained on.
    """
    by_step: dict[int, dict[str, float]] = {}
    bad: list[int] = []
    dropped_keys: set[str] = set()
    overwritten: set[int] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad.append(lineno)
            continue
        if not isinstance(obj, dict):
            bad.append(lineno)
            continue
        if set(obj) == {"step", "data"} and isinstance(obj["data"], dict):
            obj = {"step": obj["step"], **obj["data"]}
        step = obj.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step != int(step):
            bad.append(lineno)
            continue
        row: dict[str, float] = {}
        for key, value in obj.items():
            if key == "step":
                continue
            v = _to_float(value)
            if v is None:
                dropped_keys.add(key)
                continue
            row[key] = v
        step = int(step)
        prev = by_step.setdefault(step, {"step": float(step)})
        if set(prev) & set(row):
            overwritten.add(step)
        prev.update(row)
    notes: list[str] = []
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        notes.append(f"{source}: skipped {len(bad)} unreadable line(s) (line {shown})")
    if dropped_keys:
        notes.append(f"{source}: ignored non-numeric value(s) for: {', '.join(sorted(dropped_keys))}")
    if overwritten:
        notes.append(
            f"{source}: step(s) {', '.join(map(str, sorted(overwritten)))} were logged more than once; "
            "the later value was kept"
        )
    rows = [by_step[s] for s in sorted(by_step)]
    for r in rows:
        r["step"] = int(r["step"])  # type: ignore[assignment]  # step stays an int for display
    return rows, notes


def load_spec(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """`spec.yaml` as a plain nested dict, or None with a note when absent or unreadable.

    The pydantic spec is deliberately not imported: the report must read any run directory,
    including ones written by an older launcher.
    """
    if not path.is_file():
        return None, [f"{path.name} not found: config fields and the expected GPU count are unknown"]
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - any parse failure degrades to "config unknown"
        return None, [f"{path.name} could not be read ({type(exc).__name__}); config fields are unknown"]
    if not isinstance(data, dict):
        return None, [f"{path.name} is not a mapping; config fields are unknown"]
    return data, []


def nonfinite_note(path: Path) -> list[str]:
    """A note on the values the metrics sink stored as null because they were NaN or ±inf.

    `metrics.meta.json` keeps them under `nonfinite` (`{"<step>": {"<key>": "nan"|"inf"|"-inf"}}`);
    an infinite grad norm, for one, is worth saying out loud rather than silently dropping.
    """
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        cells = [
            (int(step), key, str(v)) for step, kv in (meta.get("nonfinite") or {}).items() for key, v in kv.items()
        ]
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    if not cells:
        return []
    infs = [c for c in sorted(cells) if c[2] != "nan"]
    text = (
        f"{META_FILE}: {len(cells)} logged value(s) were NaN or infinite "
        f"(null in {METRICS_FILE}, left out of the statistics)"
    )
    if infs:
        shown = ", ".join(f"step {s} {k} = {v}" for s, k, v in infs[:5]) + (" ..." if len(infs) > 5 else "")
        text += f"; infinite: {shown}"
    return [text]


def load_run(run_dir: str | os.PathLike[str]) -> Run:
    """Load `RUN_DIR/metrics.jsonl` (required), `RUN_DIR/spec.yaml` and `RUN_DIR/pods.json` (optional).

    Raises `BadInput` when the directory or `metrics.jsonl` is missing, unreadable, or holds no
    readable row.
    """
    path = resolve_run_dir(run_dir)
    metrics = path / METRICS_FILE
    if not metrics.is_file():
        raise BadInput(f"{metrics} not found: run `launcher metrics` first, or pass the run directory that holds it")
    try:
        text = metrics.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{metrics} could not be read: {exc}") from exc
    rows, notes = parse_metrics(text.splitlines(), source=METRICS_FILE)
    if not rows:
        why = f" ({notes[0].split(': ', 1)[1]})" if notes else " (the file is empty)"
        raise BadInput(f"{metrics} holds no readable metric row{why}")
    notes += nonfinite_note(path / META_FILE)
    spec, spec_notes = load_spec(path / SPEC_FILE)
    name = path.resolve().name
    if spec and isinstance(spec.get("name"), str) and spec["name"]:
        name = spec["name"]
    return Run(path=path, name=name, rows=rows, spec=spec, notes=notes + spec_notes, pods=placement.load(path))


def spec_get(spec: dict[str, Any] | None, dotted: str) -> Any:
    """The value at a dotted path of the spec (`rollout.n`), or None when absent."""
    node: Any = spec
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def flatten(spec: dict[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as `{"a.b.c": leaf}`; lists stay leaves so they compare as a whole."""
    out: dict[str, Any] = {}
    for key, value in (spec or {}).items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out
