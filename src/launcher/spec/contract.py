"""The contract between the launcher and its pods: what the CPU image carries (its tag convention, the verl CPU
platform, the built-in models a spec names as `builtin:<name>`), environment names, and the marker lines the
entrypoint prints for the launcher to read back from the pod log.

Both sides import this module (the entrypoint in the pod, the launcher's follower and report), so the text
one writes is the text the other parses. Pure: no Kubernetes, no verl.

Eval markers (`launcher eval`; read by `launcher.run.eval`):

    [eval] model=base path=<model path>                       before the base model's verl run
    [eval] model=checkpoint step=25 path=<merged dir>         before the checkpoint's verl run
    [eval] questions {"model": "base", "n": 1319, ...}        after a run: per-question scores
    [eval] done model=base status=0                           after a run: verl's exit status
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

# --------------------------------------------------------------------------------------------------
# The CPU image (docker/Dockerfile.cpu): what it carries for verl's real GRPO trainer on CPU-only pods
# (docker/verl-cpu/README.md), and how a spec names it.

# An image carries the verl CPU platform when its tag ends in this (ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu).
CPU_IMAGE_TAG_SUFFIX = "-cpu"
CPU_IMAGE_EXAMPLE = "ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu"
# verl imports the modules named in VERL_USE_EXTERNAL_MODULES in every process that imports verl; this one
# registers the `cpu` platform that VERL_PLATFORM selects (docker/verl-cpu/grpo_verl_cpu/platform.py).
CPU_PLATFORM_MODULE = "grpo_verl_cpu.platform"
CPU_PLATFORM = "cpu"
# The image's virtual environment (its VIRTUAL_ENV); Intel OpenMP for vLLM's CPU kernels lives in its lib/.
DEFAULT_VENV = "/opt/venv"
IOMP_LIBRARY = "lib/libiomp5.so"


def _last_part(image: str) -> str:
    """`name:tag` of an image reference (`repo[:port]/name:tag[@digest]`): after the last "/", before any digest."""
    return image.split("@", 1)[0].rsplit("/", 1)[-1]


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`repo[:port]/name:tag[@digest]`), or None when it has none."""
    name = _last_part(image)
    return name.split(":", 1)[1] if ":" in name else None


def is_cpu_image(image: str) -> bool:
    """True for an image that carries the verl CPU platform: by convention its tag ends in `-cpu`."""
    return (image_tag(image) or "").endswith(CPU_IMAGE_TAG_SUFFIX)


# The project's images (docker/Dockerfile for GPUs, docker/Dockerfile.cpu) are named this, in any registry a user
# mirrors them to; both carry the built-in models (BUILTIN_MODELS).
PROJECT_IMAGE_NAME = "verl-grpo"


def carries_builtin_models(image: str) -> bool:
    """True for the project's images (named PROJECT_IMAGE_NAME, any registry and tag) and any CPU image."""
    return _last_part(image).split(":", 1)[0] == PROJECT_IMAGE_NAME or is_cpu_image(image)


class BuiltinModel(NamedTuple):
    """A model an image carries, addressed in a spec as `model.path: builtin:<name>`."""

    path: str  # the model directory inside the image
    description: str  # what it is, in words (`launcher validate`, the run report)


BUILTIN_PREFIX = "builtin:"
# Built at image build time by `python -m grpo_verl_cpu.tiny_model OUT --seed 0`
# (docker/verl-cpu/grpo_verl_cpu/tiny_model.py): Qwen2ForCausalLM, hidden 128, 2 layers, 481-token BPE,
# random weights. Real in every mechanism of a verl run; its scores say nothing about GSM8K.
BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "tiny-qwen2": BuiltinModel(
        "/opt/grpo-launcher/models/tiny-qwen2",
        "tiny random Qwen2, 357,632 parameters, in the project's images; test model, not Qwen2.5",
    ),
}


def builtin_name(path: str) -> str | None:
    """`tiny-qwen2` for `builtin:tiny-qwen2`; None for anything that is not a `builtin:` address."""
    return path[len(BUILTIN_PREFIX):] if path.startswith(BUILTIN_PREFIX) else None


def builtin_model(path: str) -> BuiltinModel | None:
    """The built-in model `path` names (`builtin:<name>`), or None (not a builtin address, or an unknown name)."""
    name = builtin_name(path)
    return None if name is None else BUILTIN_MODELS.get(name)


def describe_model(path: str) -> str:
    """`path` as a person reads it: a built-in model with what it is, anything else as written."""
    known = builtin_model(path)
    return f"{path} ({known.description})" if known else path


# --------------------------------------------------------------------------------------------------
# The run's ConfigMap, mounted read-only in every pod: the resolved spec, and a reward function from a local file
# (reward.function.source), which verl imports from its path there.

SPEC_MOUNT = "/etc/grpo"
SPEC_PATH = f"{SPEC_MOUNT}/spec.yaml"
REWARD_FILE_KEY = "reward.py"
REWARD_FILE_PATH = f"{SPEC_MOUNT}/{REWARD_FILE_KEY}"


def describe_source(text: str) -> str:
    """A reward file's content in one line (validate, the report): its size and the start of its sha256."""
    data = text.encode("utf-8")
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}"


# --------------------------------------------------------------------------------------------------
# Environment and markers

# `submit --new` renders this into every pod: the first start that sees a new token sets the run's earlier
# checkpoints aside (`launcher.entrypoint.resume.start_over`).
START_OVER_ENV = "LAUNCHER_START_OVER"
# The attempt's name (the pod's restart), set by the entrypoint for its child and read back in metrics files.
ATTEMPT_ENV = "LAUNCHER_ATTEMPT"


def attempt_id(env: Mapping[str, str]) -> str:
    """Name of this attempt's metrics file: LAUNCHER_ATTEMPT, else the UTC start time."""
    return env.get(ATTEMPT_ENV) or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


LABELS = ("base", "checkpoint")
PREFIX = "[eval] "

# The marker may follow a kubectl/CRI timestamp or a Ray prefix in the raw log: search, anchored at
# the end, for the entrypoint's own text (model paths are printable and never contain " step=").
_MARKER = re.compile(r"\[eval\] model=(base|checkpoint)(?: step=(\d+))?(?: path=(.*))?$")
_QUESTIONS = re.compile(r"\[eval\] questions (\{.*\})$")
_DONE = re.compile(r"\[eval\] done model=(base|checkpoint) status=(-?\d+)$")


def marker_line(label: str, *, model: str, step: int | None = None) -> str:
    """The line printed before one model's verl run (without newline)."""
    if label not in LABELS:
        raise ValueError(f"label must be one of {LABELS}, got {label!r}")
    text = f"{PREFIX}model={label}"
    if step is not None:
        text += f" step={int(step)}"
    return f"{text} path={model}"


def done_line(label: str, status: int) -> str:
    """The line printed after one model's verl run: its exit status."""
    return f"{PREFIX}done model={label} status={int(status)}"


def question_id(prompt: str, ground_truth: Any) -> str:
    """A stable id for one test question: the same text and answer give the same id in every run."""
    return hashlib.sha256(f"{prompt}\x00{ground_truth}".encode()).hexdigest()[:16]


def question_means(rows: Iterable[Mapping[str, Any]], score: Callable[[Mapping[str, Any]], float]) -> dict[str, float]:
    """Question id → the mean of `score(row)` over the question's rows (verl's validation dump: `input`, `gts`)."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        qid = question_id(str(row.get("input", "")), row.get("gts"))
        acc = sums.setdefault(qid, [0.0, 0])
        acc[0] += float(score(row))
        acc[1] += 1
    return {k: s / n for k, (s, n) in sums.items()}


def questions_payload(label: str, rows: Iterable[Mapping[str, Any]],
                      flexible: Mapping[str, float] | None = None) -> dict:
    """Per-question scores from verl's validation dump rows (`input`, `gts`, `score`).

    Several rows of one question (val_kwargs.n > 1) are averaged; with greedy decoding n is 1 and
    scores are 0/1. `flexible` maps question id → re-scored value (verl's `method="flexible"`).
    Lists follow the sorted ids; `ids_sha256` names that order so pairing can be checked.
    """
    strict = question_means(rows, lambda row: row.get("score") or 0.0)
    ids = sorted(strict)
    out = {
        "model": label,
        "n": len(ids),
        "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "strict": [_num(strict[i]) for i in ids],
    }
    if flexible is not None and all(i in flexible for i in ids):
        out["flexible"] = [_num(flexible[i]) for i in ids]
    return out


def _num(x: float) -> float | int:
    """0/1 as ints keep the log line short; anything else rounded."""
    return int(x) if x in (0.0, 1.0) else round(float(x), 6)


def questions_line(payload: Mapping[str, Any]) -> str:
    """The `[eval] questions {...}` line (compact JSON on one line)."""
    return PREFIX + "questions " + json.dumps(payload, separators=(",", ":"), sort_keys=True)


# After verl exits 0, the entrypoint looks at the checkpoint it left on the volume and says so in one line, which
# `doctor --rehearse` reads (the rehearsal's checkpoint is judged by the files, not by verl's save timing alone):
#   [entrypoint] checkpoint global_step_2 on the volume: complete (4 files, 12.3 MB)
#   [entrypoint] checkpoint global_step_2 on the volume: incomplete, missing actor/optim_world_size_1_rank_0.pt
#   [entrypoint] checkpoint none on the volume under /workspace/checkpoints/...
_CHECKPOINT = re.compile(r"\[entrypoint\] checkpoint (?:global_step_(\d+)|none) on the volume(?::| under) (.*)$")


def checkpoint_line(step: int | None, missing: list[str], files: int = 0, size: int = 0, where: str = "") -> str:
    """The entrypoint's line about the checkpoint verl left (see above); `size` in bytes."""
    if step is None:
        return f"checkpoint none on the volume under {where}"
    if missing:
        return f"checkpoint global_step_{step} on the volume: incomplete, missing {', '.join(missing)}"
    return f"checkpoint global_step_{step} on the volume: complete ({files} files, {size / 1e6:.1f} MB)"


def read_checkpoint_line(line: str) -> tuple[int | None, bool, str] | None:
    """(step or None, complete, the rest) of an entrypoint's checkpoint line (anywhere in a raw log line), else None."""
    m = _CHECKPOINT.search(line.rstrip())
    if m is None:
        return None
    step = int(m.group(1)) if m.group(1) else None
    return step, step is not None and m.group(2).startswith("complete"), m.group(2)
