"""What ran: the records `launcher relaunch` and `launcher diff` read from a run directory.

Next to `spec.yaml` and `manifests.yaml` (submit), a run directory holds:

- `provenance.json` (submit): `{"launcher_version", "job", "config_hash", "image", "pinned_images",
  "relaunched_from"}`: the launcher that rendered the run, the image reference the spec names, and
  for a relaunch the digests it pinned and the run directory it came from.
- `images.json` (the log follower, from pod status): `{"pods": {pod: {container: {"image", "imageID"}}}}`,
  the image each container actually ran, as the kubelet reports it in `containerStatuses[].imageID`.
  On a registry-pulled image that is `repo@sha256:<manifest digest>`; on an image loaded into the
  node's containerd without a registry it is `sha256:<image id>`, which containerd also resolves
  (verified on the local cluster's real node). KWOK fake nodes run no container and report `""`:
  recorded as null ("not reported").
- `verl_config.json` (the log follower): the resolved config verl pprints at start
  (`pprint(OmegaConf.to_container(config, resolve=True))` in `main_ppo`, verl.md §5.1), parsed from
  the log with a literal-only evaluator (`nan`/`inf` allowed, nothing executed).

Reads pod dicts and log text only; never imports the Kubernetes client.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Iterable

from launcher.run.dirs import RunDir, write_atomic

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY = re.compile(r"^\((?:[\w.:-]+ )?pid=\d+(?:, ip=[^)]*)?\) ?")
# The same process's stderr, which Ray forwards apart from its stdout and so between two pieces of the pprint:
# Python's logging in its default format, and a warning's two lines (`path.py:N: UserWarning: ...`, `  warnings.warn(`).
_FOREIGN = re.compile(r"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):|\S+\.py:\d+: \w*Warning: |\s+warnings\.warn\()")
VERL_TOP_KEYS = {"actor_rollout_ref", "data", "trainer"}  # a dict without these is some other pprint
MAX_CONFIG_LINES = 20_000  # verl's full config is ~500 lines; a runaway "{" line never holds memory
MAX_READINGS = 8  # readings of a `{'` line followed at once (config start or a piece of one)
MAX_PPRINT_LINE = 16_384  # characters in one pprint line put back together (pprint wraps at 80 plus its indentation)


# --------------------------------------------------------------------------------------------------
# provenance.json


def write_submitted(run_dir: RunDir, spec, *, pinned_images: dict[str, str] | None = None,
                    relaunched_from: str | None = None) -> None:
    """Record the launcher version, the image reference and the user's own verl overrides of a run being created."""
    from launcher import __version__

    data = {"launcher_version": __version__, "job": spec.job_name, "config_hash": spec.config_hash(),
            "image": spec.image, "pinned_images": dict(pinned_images or {}), "relaunched_from": relaunched_from,
            "verl_overrides": list(spec.verl.overrides)}
    write_atomic(run_dir.provenance, json.dumps(data, indent=1, sort_keys=True) + "\n")


def load_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None when it is missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------------
# images.json


class ImageRecorder:
    """Keeps `images.json` up to date from pod objects; writes only when something changed."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir
        self.pods: dict[str, dict] = (load_json(run_dir.images) or {}).get("pods") or {}

    def record(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        seen = dict(self.pods.get(name) or {})
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            entry = {"image": cs.get("image"), "imageID": image_id(cs.get("imageID"))}
            old = seen.get(cs.get("name"))
            if old is None or (entry["imageID"] and old != entry):
                seen[cs.get("name")] = entry
        if seen != self.pods.get(name):
            self.pods[name] = seen
            write_atomic(self.run_dir.images, json.dumps({"pods": self.pods}, indent=1, sort_keys=True) + "\n")


def image_id(raw: str | None) -> str | None:
    """The kubelet's imageID without a runtime scheme (`docker-pullable://`), None when not reported."""
    if not raw:
        return None
    return raw.split("://", 1)[1] if "://" in raw else raw


def digests_by_image(images: dict | None) -> dict[str, set[str]]:
    """`images.json` -> {image reference as the pod spec named it: {imageIDs the containers ran}}."""
    out: dict[str, set[str]] = {}
    for containers in ((images or {}).get("pods") or {}).values():
        for entry in containers.values():
            ref, iid = entry.get("image"), entry.get("imageID")
            out.setdefault(ref, set())
            if iid:
                out[ref].add(iid)
    return out


def pin_images(objects: list[dict], pins: dict[str, str]) -> list[dict]:
    """`objects` with every container whose image is a key of `pins` switched to its pinned reference.

    A rendered object stays as `render` made it otherwise (labels, config hash, ConfigMap): the spec
    names the image the user wrote, the pods run the digest the earlier run ran."""
    import copy

    out = copy.deepcopy(objects)

    def walk(node):
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                for c in node.get(key) or []:
                    if isinstance(c, dict) and c.get("image") in pins:
                        c["image"] = pins[c["image"]]
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(out)
    return out


# --------------------------------------------------------------------------------------------------
# verl_config.json


class VerlConfigCapture:
    """Finds verl's start-up config pprint in one stream's lines; `.config` once it has parsed.

    Ray forwards a worker's output as it reads it, so under load one pprint line can arrive in pieces, each with the
    actor's prefix: `'turbo_config': {'distributed': ` then `{'expert_fully_shard_parallel_size': 1,`, or `None`
    then `,` (tests/fixtures/verl_config_split_by_ray.log, from a real run). pprint starts every next line with
    spaces, so a piece that does not is joined to the line before. A `{'` line may be such a piece or the start of
    the config, so the capture follows every reading still alive (at most MAX_READINGS), each fed only its own
    actor's lines. The process's own stderr lines (logging, warnings) can land between two pieces: they are left
    out (`_FOREIGN`).
    """

    def __init__(self):
        self._candidates: list[_Candidate] = []
        self.config: dict | None = None

    def feed(self, lines: Iterable[str]) -> dict | None:
        """Feed lines in order; returns the config the first time it is complete, else None."""
        if self.config is not None:
            return None
        for line in lines:
            clean = _ANSI.sub("", line)
            m = _RAY.match(clean)
            actor, text = (m.group(0).strip() if m else None), _RAY.sub("", clean, count=1)
            if _FOREIGN.match(text):
                continue
            if text.startswith("{'"):
                # every live reading is kept (a real run had three such pieces: ref, rollout, optim; keeping only the
                # newest two dropped the config's own); a reading dies when its brackets close below zero, and at
                # MAX_READINGS the oldest and the newest stay
                live = [*self._candidates, _Candidate(actor)]
                self._candidates = live if len(live) <= MAX_READINGS else [live[0], *live[1 - MAX_READINGS:]]
            for cand in list(self._candidates):
                if cand.actor != actor:
                    continue  # another actor's line between two of this one's
                verdict = cand.add(text)
                if verdict is False:
                    self._candidates.remove(cand)
                elif verdict is not None:
                    self.config, self._candidates = verdict, []
                    return verdict
        return None


class _Candidate:
    """One reading of a pprint in progress: its lines so far and its bracket depth outside string literals (when a
    parse can succeed; the parse decides)."""

    def __init__(self, actor: str | None):
        self.actor, self.lines, self.depth_before_last = actor, [], 0

    def add(self, text: str) -> dict | bool | None:
        """The config when this line completes it, False when this reading cannot be it, else None."""
        if self.lines and text and not text.startswith((" ", "\t")):
            self.lines[-1] += text  # a piece of the line before
        else:
            if self.lines:
                self.depth_before_last += _depth(self.lines[-1])
            self.lines.append(text)
        if len(self.lines) > MAX_CONFIG_LINES or len(self.lines[-1]) > MAX_PPRINT_LINE:
            return False  # not a pprint: a reading that took, say, step lines for pieces ends here
        depth = self.depth_before_last + _depth(self.lines[-1])
        if depth < 0:
            return False
        if depth == 0 and text.rstrip().endswith("}"):
            parsed = parse_literal("\n".join(self.lines))
            if isinstance(parsed, dict):
                return parsed if VERL_TOP_KEYS <= parsed.keys() else False
        return None


_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _depth(line: str) -> int:
    """Brackets opened minus closed in one pprint line, string literals left out."""
    bare = _STRING.sub("", line)
    return sum(bare.count(c) for c in "{[(") - sum(bare.count(c) for c in "}])")


_NAMES = {"nan": math.nan, "inf": math.inf, "None": None, "True": True, "False": False}


def parse_literal(text: str):
    """A Python literal (dicts, lists, tuples, strings, numbers, None, bools, `nan`, `inf`), or None.

    pprint writes floats with `repr`, so a non-finite value appears as a bare `nan`/`inf`, which
    `ast.literal_eval` refuses; this walker allows exactly those names and nothing callable."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None

    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Dict):
            return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Name) and node.id in _NAMES:
            return _NAMES[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v if isinstance(node.op, ast.USub) else v
        raise ValueError("not a literal")

    try:
        return ev(tree.body)
    except (ValueError, TypeError, RecursionError):
        return None


def save_verl_config(run_dir: RunDir, config: dict, pod: str) -> bool:
    """Write `verl_config.json` unless the run directory has one (the first attempt's config is what ran)."""
    if run_dir.verl_config.exists():
        return False
    write_atomic(run_dir.verl_config, json.dumps({"pod": pod, "config": config}, indent=1, default=str,
                                                 allow_nan=True) + "\n")
    return True


def flatten(obj, prefix: str = "") -> dict[str, object]:
    """Nested dicts -> {"a.b.c": leaf}; lists are leaves (compared whole)."""
    out: dict[str, object] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out
