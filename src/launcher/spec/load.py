"""Loading experiment configs: safe YAML, `base:` includes, `--set` overrides, then the spec.

YAML is untrusted input here (configs are shared, pasted, generated), so the loader refuses what
can hurt: aliases (the "billion laughs" bomb), deep nesting, huge or binary files. Every failure is
a `BadInput` naming the file and what was wrong, raised before anything talks to a cluster.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import yaml

from launcher.errors import BadInput

if TYPE_CHECKING:  # pydantic is imported only when a config is validated with it (spec_from_raw)
    from launcher.spec.model import ExperimentSpec
    from launcher.spec.problems import Problem

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a real config is a few KiB
MAX_DEPTH = 32
MAX_NODES = 20_000
MAX_BASE_CHAIN = 8
BASE_KEY = "base"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases, with bounded depth and node count."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*ref) are not allowed in configs", event.start_mark
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES} YAML nodes", self.peek_event().start_mark)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH}", self.peek_event().start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml_text(text: str, source: str) -> Any:
    """Parse one YAML document with the strict loader; errors become `BadInput`."""
    try:
        loader = _StrictLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise BadInput(f"{source}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise BadInput(f"{source}: YAML nested too deeply") from None


def read_text_bounded(path: Path, limit: int = MAX_CONFIG_BYTES) -> str:
    """Read a small UTF-8 text file, refusing directories, huge and binary files."""
    if str(path) == "-":
        raise BadInput("reading a config from stdin is not supported; pass a file")
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if not path.is_file():
        raise BadInput(f"{path}: not a regular file")
    size = path.stat().st_size
    if size > limit:
        raise BadInput(f"{path}: {size} bytes; a config must be at most {limit} bytes")
    data = path.read_bytes()
    if b"\x00" in data:
        raise BadInput(f"{path}: binary data (NUL bytes); expected a YAML text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def deep_merge(base: dict, override: dict) -> dict:
    """Mappings merge key by key; any other value (lists included) is replaced whole."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_raw(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    """Load a config file and its `base:` chain into one plain mapping (the `base` key removed)."""
    path = Path(path)
    resolved = path.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, resolved))
        raise BadInput(f"{path}: `base:` cycle: {cycle}")
    if len(_chain) >= MAX_BASE_CHAIN:
        raise BadInput(f"{path}: `base:` chain longer than {MAX_BASE_CHAIN}")
    data = parse_yaml_text(read_text_bounded(path), str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    base = data.pop(BASE_KEY, None)
    read_reward_source(data, path.parent)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise BadInput(f"{path}: {BASE_KEY}: expected a relative or absolute file path, got {base!r}")
    parent = load_raw(path.parent / base, (*_chain, resolved))
    return deep_merge(parent, data)


def _reward_path(raw: dict) -> Any:
    reward = raw.get("reward")
    fn = reward.get("function") if isinstance(reward, dict) else None
    return fn.get("path") if isinstance(fn, dict) else None


def read_reward_source(raw: dict, base_dir: Path) -> None:
    """Read a local reward file (`reward.function.path: ./my_reward.py`) into `reward.function.source`, so the spec
    (its hash, the run's ConfigMap) carries the content. Relative paths are taken from `base_dir` (the directory
    of the config file that names it). A mapping that already holds `source` (a run's spec.yaml, or Helm's
    --set-file) is left as it is; `pkg://` modules live in the image and are not read."""
    from launcher.spec.model import MAX_REWARD_SOURCE_BYTES

    path = _reward_path(raw)
    fn = raw["reward"]["function"] if path is not None else None
    if not isinstance(path, str) or path.startswith("pkg://") or not path.endswith(".py") or "source" in fn:
        return  # not a local file (the model says what is wrong with a bad path)
    file = base_dir / path
    where = f"reward.function.path: {path}" + ("" if Path(path).is_absolute() else f" (looked for {file.resolve()})")
    if not file.is_file():
        raise BadInput(f"{where}: expected a Python file, found {'a directory' if file.is_dir() else 'nothing'}")
    size = file.stat().st_size
    if size > MAX_REWARD_SOURCE_BYTES:
        raise BadInput(f"{where}: expected at most {MAX_REWARD_SOURCE_BYTES} bytes (it travels in the run's "
                       f"ConfigMap; put larger code in the image and name it pkg://<module>), got {size} bytes")
    try:
        fn["source"] = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where}: expected UTF-8 Python source, got a non-UTF-8 byte at offset {exc.start}") from None


_SEGMENT = re.compile(r"^(?P<name>[^\[\]]+)(?P<indices>(?:\[[^\[\]]*\])*)$")
_INDEX = re.compile(r"\[([^\[\]]*)\]")


def parse_set_key(item: str, key: str) -> list[str | int]:
    """`a.b[0].c` -> ["a", "b", 0, "c"]: Helm's `--set` path syntax (dots between keys, `[N]` list indices)."""
    path: list[str | int] = []
    for segment in key.strip().split("."):
        m = _SEGMENT.match(segment)
        if not m:
            raise BadInput(f"--set {item!r}: expected a key such as rollout.n or scheduling.tolerations[0].key, "
                           f"got {key!r} (bad part {segment!r})")
        path.append(m.group("name"))
        for index in _INDEX.findall(m.group("indices")):
            if not index.strip().isdigit():
                raise BadInput(f"--set {item!r}: expected a list index [N] with N a whole number ≥ 0 after "
                               f"{m.group('name')}, got [{index}]")
            path.append(int(index))
    return path


def apply_sets(raw: dict, sets: Iterable[str]) -> dict:
    """Apply `--set a.b.c=value` overrides; the value is parsed as a YAML scalar/flow value.

    As Helm's `--set`, `a.b[0].c=v` reaches into (or creates) a list. An index may name an existing item or
    the position just past the end (which appends); one further out is refused rather than padded with nulls
    the way Helm does, since no config list accepts a null item. `a.b+=v` (not Helm's) appends v to the list.
    """
    out = copy.deepcopy(raw)
    for item in sets:
        if "=" not in item:
            raise BadInput(f"--set {item!r}: expected KEY=VALUE, e.g. rollout.n=4")
        key, _, text = item.partition("=")
        append = key.endswith("+")  # `KEY+=VALUE`: VALUE appended to the list at KEY (e.g. verl.overrides+=a.b=1)
        key = key.removesuffix("+")
        if not all(key.strip().split(".")):
            raise BadInput(f"--set {item!r}: expected a dotted key such as rollout.n, got {key!r}")
        path = parse_set_key(item, key)
        value = parse_yaml_text(text, f"--set {key}") if text.strip() else ""
        node: Any = out
        for depth, (part, nxt) in enumerate(zip(path, path[1:] + [None])):
            where = _path_text(path[:depth + 1])
            if isinstance(part, int):
                if part > len(node):
                    raise BadInput(f"--set {item!r}: index {part} is out of range: {_path_text(path[:depth])} has "
                                   f"{len(node)} item(s) (use [0] to [{len(node)}]; [{len(node)}] appends)")
                if part == len(node):
                    node.append(None)
            if nxt is None and append:
                items = node[part] if isinstance(part, int) else node.get(part)
                if items is not None and not isinstance(items, list):
                    raise BadInput(f"--set {item!r}: {where} is not a list (it holds {items!r}); += appends to a list")
                node[part] = [*(items or []), value]
                break
            if nxt is None:
                node[part] = value
                break
            child = node[part] if isinstance(part, int) else node.get(part)
            if child is None:
                child = node[part] = [] if isinstance(nxt, int) else {}
            if isinstance(nxt, int) and not isinstance(child, list):
                raise BadInput(f"--set {item!r}: {where} is not a list (it holds {child!r})")
            if not isinstance(nxt, int) and not isinstance(child, dict):
                raise BadInput(f"--set {item!r}: {where} is not a section (it holds {child!r})")
            node = child
    return out


def _path_text(path: list[str | int]) -> str:
    """["a", "b", 0, "c"] -> "a.b[0].c" (for messages)."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def spec_from_raw(raw: dict, source: str = "config") -> ExperimentSpec:
    """Validate a plain mapping into an `ExperimentSpec`, raising one `BadInput` listing every problem."""
    from pydantic import ValidationError

    from launcher.spec.model import ExperimentSpec

    from launcher.spec.rules import check_rules

    from launcher.spec.problems import problems_from_pydantic

    try:
        spec = ExperimentSpec.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(source, problems_from_pydantic(exc)) from None
    problems = check_rules(spec)
    if problems:
        raise _invalid(source, problems)
    return spec


def _invalid(source: str, problems: list[Problem]) -> BadInput:
    from launcher.spec.problems import format_problems

    return BadInput(f"{source}: invalid experiment config ({len(problems)} problem(s)):\n{format_problems(problems)}")


def load_spec(path: str | Path, sets: Iterable[str] = (), backend: str | None = None) -> ExperimentSpec:
    """The one way every verb turns CONFIG [--set ...] [--backend ...] into a validated spec."""
    return spec_from_raw(_raw_for(path, sets, backend), str(path))


def _raw_for(path: str | Path, sets: Iterable[str], backend: str | None) -> dict:
    raw = load_raw(path)
    before = _reward_path(raw)
    raw = apply_sets(raw, sets)
    if _reward_path(raw) != before:  # a reward file named on the command line: relative to the working directory
        raw["reward"]["function"].pop("source", None)
        read_reward_source(raw, Path.cwd())
    if backend:
        raw["backend"] = backend
    return raw


def dump_spec(spec: ExperimentSpec) -> str:
    """The resolved config as YAML (what the ConfigMap carries and `runs/<name>/spec.yaml` holds)."""
    return yaml.safe_dump(spec.canonical_data(), sort_keys=False, allow_unicode=True, width=1000)
