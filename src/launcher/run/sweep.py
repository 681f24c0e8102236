"""Sweeps: the cross product of `--grid KEY=V1,V2` axes as distinct runs of one experiment (pure).

A grid key is a dotted key exactly as `--set` takes it (`rollout.n`, `data.max_response_length`,
`scheduling.tolerations[0].key`); each member is the config with `--set` overrides and then one value per
axis applied, validated by the same `launcher.spec.load` path every verb uses. The members differ in config, so
each has its own config hash, job name (`<name>-<hash>`) and run directory; a second expansion of the same
sweep gives the same names, which is what lets a re-run attach instead of resubmitting.

`sweep.json` (in `runs/sweeps/<sweep>/`, or the `--output-dir`): the sweep's own record::

    {"apiVersion": "grpo-launcher/v1", "kind": "Sweep", "name": "<experiment>-sweep-<hash>",
     "config": CONFIG, "sets": [...], "grid": {KEY: [value, ...]}, "varied": [KEY, ...],
     "members": [{"job": ..., "config_hash": ..., "params": {KEY: value}, "run_dir": ...}]}

Never imports the Kubernetes client.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from launcher.errors import BadInput

API_VERSION = "grpo-launcher/v1"
SWEEP_FILE = "sweep.json"
SWEEPS_DIR = "sweeps"  # under the runs root; no job is named so (job names end in -<hash>)
MAX_MEMBERS = 64  # a typo'd axis (V1,...,V99 x ...) should not submit hundreds of GPU jobs
# A sweep runs in one namespace with one Kube connection: these keys are refused as axes.
FIXED_KEYS = ("scheduling.namespace",)


@dataclass(frozen=True)
class Axis:
    """One `--grid KEY=V1,V2,...`: the key as given and its values as text (parsed as YAML by `--set`)."""

    key: str
    values: tuple[str, ...]


@dataclass
class Member:
    """One run of the sweep: its axis values and the validated spec."""

    params: dict[str, Any]  # KEY -> the value as the spec holds it (YAML-parsed)
    sets: list[str]  # the --set overrides that make this member (the sweep's own, then one per axis)
    spec: Any  # ExperimentSpec

    @property
    def job(self) -> str:
        return self.spec.job_name

    def label(self) -> str:
        """`rollout.n=4 data.max_response_length=512`: the member's axis values, for tables and legends."""
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class Sweep:
    """The expanded sweep: its axes, its members in grid order (the first axis varies slowest)."""

    config: str
    sets: list[str]
    axes: list[Axis]
    members: list[Member] = field(default_factory=list)

    @property
    def name(self) -> str:
        """`<experiment>-sweep-<hash>`: the hash covers every member's job name, so the same grid over the same
        config is the same sweep (and a changed config or grid a new one)."""
        digest = hashlib.sha256("\n".join(sorted(m.job for m in self.members)).encode()).hexdigest()[:8]
        return f"{self.members[0].spec.name}-sweep-{digest}"

    @property
    def varied(self) -> list[str]:
        return [a.key for a in self.axes]

    def document(self, run_dir_of=None) -> dict:
        """The `sweep.json` document; `run_dir_of(job)` gives each member's run directory (omitted when None)."""
        members = []
        for m in self.members:
            entry: dict[str, Any] = {"job": m.job, "config_hash": m.spec.config_hash(), "params": m.params}
            if run_dir_of is not None:
                entry["run_dir"] = str(run_dir_of(m.job))
            members.append(entry)
        return {"apiVersion": API_VERSION, "kind": "Sweep", "name": self.name, "config": self.config,
                "sets": list(self.sets), "grid": {a.key: [_parsed(a.key, v) for v in a.values] for a in self.axes},
                "varied": self.varied, "members": members}


def split_values(text: str) -> list[str]:
    """`1,2,[a, b],"x,y"` -> ["1", "2", "[a, b]", '"x,y"']: commas inside brackets, braces or quotes do not split."""
    out, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    return out


def parse_grid(items: Iterable[str], sets: Iterable[str] = ()) -> list[Axis]:
    """The axes of `--grid KEY=V1,V2` arguments; BadInput (exit 2) naming the argument on any problem."""
    from launcher.spec.load import parse_set_key

    axes: list[Axis] = []
    set_keys = {s.partition("=")[0].strip() for s in sets if "=" in s}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise BadInput(f"--grid {item!r}: expected KEY=V1,V2,... (a dotted key as --set takes, e.g. "
                           "rollout.n=2,4)")
        try:
            parse_set_key(item, key)
        except BadInput as exc:
            raise BadInput(str(exc).replace("--set", "--grid", 1)) from None
        if key in FIXED_KEYS:
            raise BadInput(f"--grid {key}: a sweep runs in one namespace; set it with -n/--namespace or --set "
                           f"{key}=NS, not as an axis")
        if any(a.key == key for a in axes):
            raise BadInput(f"--grid {key}: given twice; list every value in one --grid {key}=V1,V2,...")
        if key in set_keys:
            raise BadInput(f"--grid {key}: also given with --set {key}=...; a key is either fixed (--set) or an "
                           "axis (--grid), not both")
        values = split_values(text)
        if any(v == "" for v in values):
            raise BadInput(f"--grid {item!r}: expected comma-separated values for {key}, got an empty one")
        dup = sorted({v for v in values if values.count(v) > 1})
        if dup:
            raise BadInput(f"--grid {key}: value {dup[0]!r} is listed more than once")
        axes.append(Axis(key, tuple(values)))
    if not axes:
        raise BadInput("sweep: expected at least one --grid KEY=V1,V2,...")
    return axes


def _parsed(key: str, text: str) -> Any:
    from launcher.spec.load import parse_yaml_text

    return parse_yaml_text(text, f"--grid {key}")


def expand(config: str | Path, axes: list[Axis], sets: Iterable[str] = (), backend: str | None = None) -> Sweep:
    """Every combination of the axes' values as a validated member; BadInput (exit 2) names the axis key and
    value that a config refuses (each value is checked alone first, so a bad one is named as such), or the
    combination when only values together are refused, or two combinations that give the same config."""
    from launcher.spec.load import load_spec

    sets = list(sets)
    n = 1
    for a in axes:
        n *= len(a.values)
    if n > MAX_MEMBERS:
        raise BadInput(f"--grid: {' x '.join(str(len(a.values)) for a in axes)} = {n} runs; a sweep may have at most "
                       f"{MAX_MEMBERS} (split it into several sweeps)")
    load_spec(config, sets, backend)  # the config itself (and --set) first: its own error, not an axis's
    for a in axes:
        for v in a.values:
            try:
                load_spec(config, [*sets, f"{a.key}={v}"], backend)
            except BadInput as exc:
                raise BadInput(f"--grid {a.key}: value {v!r} is refused: {exc}") from None
    sweep = Sweep(str(config), sets, axes)
    seen: dict[str, Member] = {}
    for combo in itertools.product(*(a.values for a in axes)):
        member_sets = [*sets, *(f"{a.key}={v}" for a, v in zip(axes, combo))]
        try:
            spec = load_spec(config, member_sets, backend)
        except BadInput as exc:
            where = ", ".join(f"{a.key}={v}" for a, v in zip(axes, combo))
            raise BadInput(f"--grid: the combination {where} is refused: {exc}") from None
        member = Member({a.key: _parsed(a.key, v) for a, v in zip(axes, combo)}, member_sets, spec)
        if member.job in seen:
            raise BadInput(f"--grid: {seen[member.job].label()} and {member.label()} give the same config "
                           f"(job {member.job}); list distinct values")
        seen[member.job] = member
        sweep.members.append(member)
    return sweep


def sweep_dir(runs_root: Path, name: str) -> Path:
    """`<runs root>/sweeps/<sweep name>/`: sweep.json and the sweep report."""
    return Path(runs_root) / SWEEPS_DIR / name


def write_sweep_file(directory: Path, doc: dict) -> Path:
    """Write `sweep.json` atomically into `directory`."""
    from launcher.run.dirs import write_atomic

    path = Path(directory) / SWEEP_FILE
    write_atomic(path, json.dumps(doc, indent=2, default=str) + "\n")
    return path


def read_sweep_file(directory: Path) -> dict | None:
    """A directory's `sweep.json`, or None when there is none (or it is unreadable)."""
    try:
        return json.loads((Path(directory) / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
