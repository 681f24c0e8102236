"""Resume decisions: on every start of a training pod, fresh, resume from global_step_N, or already finished.

The run's checkpoint directory (`spec.checkpoint_path`, per job name and so per config hash) holds
verl's own files and four of the launcher's:

- verl (0.9.1 `_save_checkpoint`): `global_step_N/actor/{model,optim,extra_state}_world_size_W_rank_R.pt`
  for every rank R of the actor's FSDP world W (`utils/checkpoint/fsdp_checkpoint_manager.py`), then
  `global_step_N/data.pt` (the dataloader state, written after every rank's barrier), then the tracker
  `latest_checkpointed_iteration.txt` holding N.
- `launcher-attempts.jsonl`: one line per start of the run's driver (its decision), so attempts are
  numbered across pods, nodes and operator retries.
- `launcher-finished.json`: written when verl exited 0; a later start of the same run (a rerun after
  the job was deleted) trains nothing and exits 0.
- `launcher-config-error.json`: written when verl failed with a configuration error
  (`launcher.entrypoint.failure`); every later start of the same run stops at once with exit 2 instead of
  training again (the operator's retries cannot fix a config; a changed config is a new run, `--new` starts over).
- `launcher-run.json`: the start-over token of `submit --new` (`LAUNCHER_START_OVER` in the pod):
  a token the directory has not seen moves everything there into `superseded-<token>/` first, so a
  started-over run is fresh while a restarted pod of that same submission (same token) still resumes.

With `trainer.resume_mode: auto` the newest complete checkpoint not newer than the tracker is
resumed (a save that is missing a rank's shard or `data.pt` is skipped in favour of the previous one);
`disable` always starts fresh, `resume_path` uses the configured path. Each start prints one line
(`Decision.line`), which the launcher's follower reads (`launcher.run.attempts`).

verl gets `resume_mode` as the spec says it on every attempt (its trackers log the config as parameters,
which MLflow refuses to change within a run), so with `auto` the decision reaches verl through verl's own
tracker file: `align_tracker` makes it name the checkpoint chosen here, or sets it aside for a fresh start.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Mapping, Sequence

from launcher.spec.contract import START_OVER_ENV
from launcher.spec.model import ExperimentSpec

TRACKER = "latest_checkpointed_iteration.txt"
ATTEMPTS = "launcher-attempts.jsonl"
FINISHED = "launcher-finished.json"
CONFIG_ERROR = "launcher-config-error.json"
RUN_FILE = "launcher-run.json"
SUPERSEDED = "superseded-"
# Per-rank files verl's FSDPCheckpointManager writes with its default checkpoint.save_contents
# (model, optimizer, extra); `optim` is the optimizer's file prefix.
SHARD_KINDS = ("model", "optim", "extra_state")
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_TAIL_BYTES = 1 << 16  # enough of a verl file-logger JSONL to hold its last few rows

Action = Literal["fresh", "resume", "finished"]


def world_size(spec: ExperimentSpec) -> int:
    """The actor's FSDP world: every GPU of the run (one rank per GPU)."""
    return spec.resources.nodes * spec.resources.workers_per_node


def saved_steps(ckpt_dir: Path) -> list[int]:
    """Step numbers of the `global_step_N` directories, ascending."""
    try:
        names = os.listdir(ckpt_dir)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _STEP_DIR.match(n)) and (ckpt_dir / n).is_dir())


def read_tracker(ckpt_dir: Path) -> int | None:
    """The step in verl's `latest_checkpointed_iteration.txt`, or None (absent or not a number)."""
    try:
        text = (ckpt_dir / TRACKER).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def missing_files(step_dir: Path, world: int) -> list[str]:
    """What a complete save of `world` ranks has that `step_dir` lacks (empty: complete)."""
    missing = []
    actor = step_dir / "actor"
    for rank in range(world):
        for kind in SHARD_KINDS:
            name = f"{kind}_world_size_{world}_rank_{rank}.pt"
            if not (actor / name).is_file():
                missing.append(f"actor/{name}")
    if not (step_dir / "data.pt").is_file():
        missing.append("data.pt")
    return missing


def last_logged_step(ckpt_dir: Path) -> int | None:
    """The highest step verl's file logger wrote in any earlier attempt (`metrics/*.jsonl`), or None."""
    best = None
    for path in sorted((ckpt_dir / "metrics").glob("*.jsonl")):
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
                tail = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        for raw in tail:
            try:
                step = json.loads(raw).get("step")
            except (ValueError, AttributeError):
                continue  # the first (cut) line of the tail, or a torn last one
            if type(step) is int and (best is None or step > best):
                best = step
    return best


@dataclass(frozen=True)
class Decision:
    """What this start of the run does, and why."""

    action: Action
    attempt: int
    step: int | None = None  # resumed from / finished at
    path: str | None = None  # the global_step_N directory verl resumes from
    skipped: tuple[str, ...] = ()  # newer saves passed over, each with what it lacks
    last_logged: int | None = None  # highest step an earlier attempt logged
    note: str = ""
    started_over: str | None = None  # where a start over moved the previous contents

    @property
    def steps_lost(self) -> int | None:
        """Steps an earlier attempt logged beyond the step this attempt starts from (None: unknown)."""
        if self.action == "finished":
            return 0
        if self.last_logged is None:
            return 0 if self.attempt == 1 else None
        return max(0, self.last_logged - (self.step or 0))

    def line(self) -> str:
        """The one line per attempt that `launcher.run.attempts.parse_attempt_line` reads back."""
        lost = self.steps_lost
        details = [*self.skipped, *([self.note] if self.note else [])]
        extra = f" ({'; '.join(details)})" if details else ""
        if self.action == "finished":
            return (f"attempt {self.attempt}: already finished at global_step_{self.step}{extra}; nothing to train "
                    "(submit --new starts over)")
        what = f"resuming from global_step_{self.step}" if self.action == "resume" else "starting fresh"
        seen = f" (an earlier attempt logged up to step {self.last_logged})" if self.last_logged is not None else ""
        return f"attempt {self.attempt}: {what}{extra}; steps lost: {'unknown' if lost is None else lost}{seen}"

    def as_json(self) -> dict:
        return {"attempt": self.attempt, "action": self.action, "step": self.step, "path": self.path,
                "skipped": list(self.skipped), "last_logged": self.last_logged, "steps_lost": self.steps_lost}


def _attempts_so_far(ckpt_dir: Path) -> int:
    try:
        text = (ckpt_dir / ATTEMPTS).read_text(encoding="utf-8")
    except OSError:
        return 0
    return sum(1 for ln in text.splitlines() if ln.strip().startswith("{"))


def _finished(ckpt_dir: Path) -> dict | None:
    try:
        doc = json.loads((ckpt_dir / FINISHED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def decide(spec: ExperimentSpec, ckpt_dir: Path | None = None) -> Decision:
    """This start's decision, read from the checkpoint directory (nothing is written)."""
    ckpt_dir = Path(ckpt_dir or spec.checkpoint_path)
    attempt = _attempts_so_far(ckpt_dir) + 1
    last = last_logged_step(ckpt_dir)
    mode = spec.trainer.resume_mode
    if mode == "disable":
        return Decision("fresh", attempt, last_logged=last, note="trainer.resume_mode is disable")
    if mode == "resume_path":
        path = spec.trainer.resume_from_path or ""
        m = re.search(r"global_step_(\d+)", path)
        return Decision("resume", attempt, int(m.group(1)) if m else None, path, last_logged=last,
                        note="trainer.resume_from_path")
    done = _finished(ckpt_dir)
    if done is not None:
        step = done.get("step")
        return Decision("finished", attempt, step if type(step) is int else spec.trainer.total_training_steps,
                        last_logged=last, note=f"marker {ckpt_dir / FINISHED}")
    tracker = read_tracker(ckpt_dir)
    if tracker is None:
        note = "no checkpoint yet" if not saved_steps(ckpt_dir) else f"no {TRACKER}"
        return Decision("fresh", attempt, last_logged=last, note=note)
    world = world_size(spec)
    skipped = []
    for step in reversed([s for s in saved_steps(ckpt_dir) if s <= tracker]):
        step_dir = ckpt_dir / f"global_step_{step}"
        missing = missing_files(step_dir, world)
        if not missing:
            return Decision("resume", attempt, step, str(step_dir), tuple(skipped), last)
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        skipped.append(f"global_step_{step} skipped: incomplete for world size {world}, missing {shown}")
    return Decision("fresh", attempt, skipped=tuple(skipped), last_logged=last,
                    note="no complete checkpoint" if skipped else f"{TRACKER} names step {tracker}, which is not there")


def start_over(ckpt_dir: Path, token: str) -> str | None:
    """Apply `submit --new`'s token: the first start that sees it moves the directory's contents aside.

    Returns the directory they went to, or None (token already applied, or nothing there).
    """
    try:
        seen = json.loads((ckpt_dir / RUN_FILE).read_text(encoding="utf-8")).get("start_over")
    except (OSError, ValueError, AttributeError):
        seen = None
    if seen == token:
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", token)[:64]
    entries = [p for p in ckpt_dir.iterdir() if not p.name.startswith(SUPERSEDED)] if ckpt_dir.is_dir() else []
    moved = None
    if entries:
        dest = ckpt_dir / f"{SUPERSEDED}{safe}"
        dest.mkdir(parents=True, exist_ok=True)
        for p in entries:
            os.replace(p, dest / p.name)
        moved = str(dest)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    _write_json(ckpt_dir / RUN_FILE, {"start_over": token, "at": _now()})
    return moved


def begin(spec: ExperimentSpec, env: Mapping[str, str], *, log: Callable[[str], None],
          pod: str | None = None) -> Decision:
    """On the driver's start: apply a start-over token, decide, record the attempt, print its line."""
    ckpt_dir = Path(spec.checkpoint_path)
    moved = None
    token = env.get(START_OVER_ENV)
    if token:
        moved = start_over(ckpt_dir, token)
        if moved:
            log(f"started over (submit --new): the previous contents of {ckpt_dir} are in {moved}")
    decision = decide(spec, ckpt_dir)
    if moved:
        decision = Decision(**{**decision.__dict__, "started_over": moved})
    record = {**decision.as_json(), "pod": pod or env.get("POD_NAME"), "started": _now()}
    try:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        with open(ckpt_dir / ATTEMPTS, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as exc:
        log(f"warning: cannot record the attempt in {ckpt_dir / ATTEMPTS} ({exc})")
    log(decision.line())
    if spec.trainer.resume_mode == "auto":
        align_tracker(ckpt_dir, decision, log=log)
    return decision


def align_tracker(ckpt_dir: Path, decision: Decision, *, log: Callable[[str], None]) -> None:
    """Make verl's tracker file name this start's decision, which verl's `auto` then reads
    (`find_latest_ckpt_path`): the chosen step for a resume; for a fresh start a tracker naming an incomplete save
    is moved to `<tracker>.skipped-attempt-<n>`. A tracker already naming the chosen step is left as verl wrote it."""
    tracker = ckpt_dir / TRACKER
    current = read_tracker(ckpt_dir)
    try:
        if decision.action == "resume" and decision.step is not None and current != decision.step:
            tmp = tracker.with_name(f".{TRACKER}.{os.getpid()}.tmp")
            tmp.write_text(str(decision.step), encoding="utf-8")  # verl's own format: the step alone
            os.replace(tmp, tracker)
            log(f"{TRACKER}: {current} -> {decision.step} (verl resumes from the newest complete checkpoint)")
        elif decision.action == "fresh" and tracker.exists():
            aside = tracker.with_name(f"{TRACKER}.skipped-attempt-{decision.attempt}")
            os.replace(tracker, aside)
            log(f"{TRACKER} (step {current}) moved to {aside.name}: no complete checkpoint to resume from")
    except OSError as exc:
        # verl would then load what its tracker names: say so, the attempt's line above is not what verl does
        log(f"warning: cannot update {tracker} ({exc}); verl's resume_mode auto reads it as it is")


def refused(spec: ExperimentSpec) -> dict | None:
    """The configuration-error marker an earlier attempt of this run left (see the module), or None."""
    try:
        doc = json.loads((Path(spec.checkpoint_path) / CONFIG_ERROR).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def finish(spec: ExperimentSpec, decision: Decision, code: int, *, log: Callable[[str], None],
           tail: Sequence[str] = ()) -> None:
    """After verl exits: status 0 leaves the finished marker (the last checkpointed step, if any); a failure is
    classified from `tail` (verl's last stderr lines), and a configuration error leaves its marker."""
    ckpt_dir = Path(spec.checkpoint_path)
    if code != 0:
        from launcher.entrypoint.failure import classify_failure

        failure = classify_failure(tail)
        retries = spec.run_policy.backoff_limit
        if failure.kind == "transient":
            log(f"verl failed: {failure.describe()}; " + (
                "a restart resumes from the newest checkpoint (run_policy.backoff_limit "
                f"{retries})" if retries else "run_policy.backoff_limit is 0: no restart"))
        elif failure.kind == "config":
            try:
                _write_json(ckpt_dir / CONFIG_ERROR, {"attempt": decision.attempt, "what": failure.what,
                                                      "line": failure.line[-2000:], "at": _now()})
            except OSError as exc:
                log(f"warning: cannot write {ckpt_dir / CONFIG_ERROR} ({exc})")
            log(f"verl failed: {failure.describe()}; a retry cannot fix a configuration: later starts of this run "
                "stop at once (fix the config, which makes a new run, or submit --new)")
        else:
            log("verl failed (not a known transient or configuration error: see its output above)")
        return
    step = read_tracker(ckpt_dir) or spec.trainer.total_training_steps
    log(checkpoint_report(spec, ckpt_dir))
    try:
        _write_json(ckpt_dir / FINISHED, {"step": step, "attempt": decision.attempt, "finished": _now()})
        log(f"run finished at step {step}: marked {ckpt_dir / FINISHED} (a rerun trains nothing; submit --new starts over)")
    except OSError as exc:
        log(f"warning: cannot write {ckpt_dir / FINISHED} ({exc}); a rerun would resume from the last checkpoint")


def checkpoint_report(spec: ExperimentSpec, ckpt_dir: Path) -> str:
    """The line about the newest checkpoint on the volume after verl exited 0 (`contract.checkpoint_line`): every
    rank's actor files and data.pt there, or what is missing."""
    from launcher.spec.contract import checkpoint_line

    steps = saved_steps(ckpt_dir)
    if not steps:
        return checkpoint_line(None, [], where=str(ckpt_dir))
    step_dir = ckpt_dir / f"global_step_{steps[-1]}"
    missing = missing_files(step_dir, world_size(spec))
    files = [p for p in step_dir.rglob("*") if p.is_file()]
    return checkpoint_line(steps[-1], missing, len(files), sum(p.stat().st_size for p in files))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["ATTEMPTS", "CONFIG_ERROR", "FINISHED", "START_OVER_ENV", "TRACKER", "Decision", "align_tracker", "begin",
           "decide", "finish", "missing_files", "read_tracker", "refused", "saved_steps", "start_over", "world_size"]
