"""In-pod GSM8K evaluation (`--mode eval --baseline` and/or `--checkpoint STEP|latest`).

The evaluation job runs the same image and entrypoint as training. For each model, one after the
other (base first: "before", then "after"):

1. the trained checkpoint is merged into Hugging Face format once, into the run's volume:
   `python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor
   --target_dir <ckpt>/global_step_N/actor/hf_merged` (notes/verl.md §8.4). The merger writes to a
   `hf_merged.partial-<pid>` directory that is renamed into place only when complete, so a pod
   killed mid-merge never leaves a half model that a retry would mistake for a finished one;
   an existing complete `hf_merged` is reused;
2. a marker line `[eval] model=<label> ...` goes to stdout (the pod log), then verl runs
   validation only (`verl_overrides(mode="eval")`: val_only + val_before_train, greedy val_kwargs)
   with a per-model `trainer.experiment_name`, `trainer.default_local_dir`, file-logger path and
   `trainer.validation_data_dir` (verl writes `<dir>/<global_step>.jsonl`, one row per generation:
   input, output, gts, score, ...);
3. the dump is reduced to one score per question (`[eval] questions {...}`), re-scored with verl's
   own GSM8K scorer in `flexible` mode as well, so the report can pair questions across models
   (paired bootstrap) and show how much of a gain is answer *format* (notes/verl.md §11);
4. `[eval] done model=<label> status=<code>`.

`launcher.run.eval` turns those lines back into `eval.json` on the launcher side.

`LAUNCHER_CHILD_CMD` replaces verl's command line (as in training); the child then also gets
`LAUNCHER_EVAL_LABEL`, `LAUNCHER_EVAL_MODEL` and `LAUNCHER_EVAL_DATA_DIR` so a stand-in can write a
dump where verl would. `LAUNCHER_MERGE_CMD` likewise replaces the merger's command (the merge step
itself is tested against the real merger on a tiny checkpoint, tests/verl/test_eval_merge.py).

Multi-node PyTorchJob: the head pod runs `python3 -m launcher.entrypoint.eval` as its "trainer"
child (attached to the Ray cluster through RAY_ADDRESS); the workers only serve Ray.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.errors import EXIT_BAD_INPUT, LauncherError
from launcher.spec.contract import attempt_id, done_line, marker_line, question_means, questions_line, questions_payload
from launcher.spec.model import ExperimentSpec
from launcher.spec.verl import hydra_value, model_path, verl_overrides

VERL_COMMAND = ["python3", "-m", "verl.trainer.main_ppo"]
LATEST_FILE = "latest_checkpointed_iteration.txt"
MERGED = "hf_merged"
CHILD_CMD_ENV = "LAUNCHER_CHILD_CMD"
MERGE_CMD_ENV = "LAUNCHER_MERGE_CMD"

RunFn = Callable[..., int]


@dataclass(frozen=True)
class Target:
    """One model to evaluate: `base` (the spec's model) or `checkpoint` (global_step_N, merged)."""

    label: str
    model: str
    step: int | None = None

    @property
    def experiment_name(self) -> str:
        return self.label if self.step is None else f"{self.label}-step{self.step}"


def actor_dir(spec: ExperimentSpec, step: int) -> Path:
    """`<checkpoint_path>/global_step_N/actor`: verl's FSDP shards and `huggingface/` config."""
    return Path(spec.checkpoint_path) / f"global_step_{step}" / "actor"


def merged_dir(spec: ExperimentSpec, step: int) -> Path:
    return actor_dir(spec, step) / MERGED


def resolve_step(spec: ExperimentSpec, checkpoint: str) -> int:
    """`STEP` as given, or `latest`: the number in `latest_checkpointed_iteration.txt`."""
    if checkpoint != "latest":
        try:
            step = int(checkpoint)
        except ValueError:
            raise LauncherError(f"--checkpoint must be a step number or 'latest', got {checkpoint!r}",
                                EXIT_BAD_INPUT) from None
        if step < 1:
            raise LauncherError(f"--checkpoint must be >= 1, got {step}", EXIT_BAD_INPUT)
        return step
    path = Path(spec.checkpoint_path) / LATEST_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise LauncherError(f"--checkpoint latest: cannot read {path} ({exc.strerror or exc}); did the "
                            "training run save a checkpoint (trainer.save_freq)?", EXIT_BAD_INPUT) from None
    if not text.isdigit():
        raise LauncherError(f"--checkpoint latest: {path} holds {text[:40]!r}, not a step number", EXIT_BAD_INPUT)
    return int(text)


def plan(spec: ExperimentSpec, *, baseline: bool, checkpoint: str | None, resolve: bool = True) -> list[Target]:
    """The models to evaluate, base first. `resolve=False` (dry run) leaves `latest` unread."""
    targets = []
    if baseline:
        targets.append(Target("base", model_path(spec)))
    if checkpoint is not None:
        if resolve or checkpoint != "latest":
            step = resolve_step(spec, checkpoint)
            targets.append(Target("checkpoint", str(merged_dir(spec, step)), step))
        else:
            targets.append(Target("checkpoint", str(actor_dir(spec, 0).parent.parent / "global_step_<latest>"
                                                    / "actor" / MERGED)))
    if not targets:
        raise LauncherError("--mode eval needs --baseline and/or --checkpoint STEP|latest (or --model PATH)",
                            EXIT_BAD_INPUT)
    return targets


def is_merged(path: Path) -> bool:
    """A complete merged model: config.json and at least one weights file."""
    return (path / "config.json").is_file() and bool(
        list(path.glob("*.safetensors")) or list(path.glob("pytorch_model*.bin")))


def _stale(merged: Path, source: Path) -> bool:
    """True when a model shard in `source` is newer than the merged config (re-trained in place)."""
    shards = list(source.glob("model_world_size_*_rank_*.pt"))
    return bool(shards) and max(p.stat().st_mtime for p in shards) > (merged / "config.json").stat().st_mtime


def merge_command(local_dir: Path, target_dir: Path, env: Mapping[str, str]) -> list[str]:
    """verl's FSDP → Hugging Face merger (notes/verl.md §8.4), or `LAUNCHER_MERGE_CMD` + the two paths."""
    custom = env.get(MERGE_CMD_ENV)
    if custom:
        return [*shlex.split(custom), str(local_dir), str(target_dir)]
    return [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
            "--local_dir", str(local_dir), "--target_dir", str(target_dir)]


def ensure_merged(spec: ExperimentSpec, step: int, *, env: Mapping[str, str], run: RunFn,
                  log: Callable[[str], None]) -> int:
    """Merge global_step_N unless a complete `hf_merged` is there; 0 on success, else the merger's status."""
    target = merged_dir(spec, step)
    source = actor_dir(spec, step)
    if is_merged(target):
        if not _stale(target, source):
            log(f"merged model present: {target}")
            return 0
        # The experiment was trained again into the same directory: the old merge is of other weights.
        log(f"merged model {target} is older than the checkpoint shards: merging again")
        shutil.rmtree(target)
    if not source.is_dir():
        raise LauncherError(f"no checkpoint at {source}: the training run saved none for step {step} "
                            f"(look in {spec.checkpoint_path})", EXIT_BAD_INPUT)
    partial = target.with_name(f"{MERGED}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    argv = merge_command(source, partial, env)
    log(f"merging checkpoint: {shlex.join(argv)}")
    code = run(argv, env, name="model merger", cwd=str(source))
    if code != 0:
        shutil.rmtree(partial, ignore_errors=True)
        log(f"model merger exited with status {code}")
        return code
    if not is_merged(partial):
        shutil.rmtree(partial, ignore_errors=True)
        raise LauncherError(f"the model merger succeeded but {partial} holds no config.json/weights", 1)
    try:
        os.rename(partial, target)
    except OSError:
        if not is_merged(target):  # another pod may have finished the same merge first: keep theirs
            raise
        shutil.rmtree(partial, ignore_errors=True)
    log(f"merged model ready: {target}")
    return 0


@dataclass(frozen=True)
class TargetRun:
    """Where one model's evaluation writes (all on the run's volume) and the verl command line."""

    target: Target
    root: Path
    argv: list[str]

    @property
    def data_dir(self) -> Path:
        return self.root / "generations"

    @property
    def file_logger(self) -> Path:
        return self.root / "metrics.jsonl"


def target_run(spec: ExperimentSpec, target: Target, *, attempt: str, ray_num_cpus: int | None,
               env: Mapping[str, str]) -> TargetRun:
    """The verl command for `target`: eval overrides plus a per-model experiment name and dump dir.

    Everything per model lives under `<checkpoint_path>/eval/<attempt>/<experiment>/`, so a retried
    pod (new attempt) never reads the previous attempt's generations, and two models never share
    verl's file-logger file (opened with mode "wb": the second would truncate the first).
    """
    root = Path(spec.checkpoint_path) / "eval" / attempt / target.experiment_name
    custom = env.get(CHILD_CMD_ENV)
    if custom:
        argv = shlex.split(custom)
    else:
        argv = [*VERL_COMMAND,
                *verl_overrides(spec, mode="eval", model=target.model,
                                experiment_name=f"{spec.name}-eval-{target.experiment_name}",
                                checkpoint_dir=str(root / "ckpt"), ray_num_cpus=ray_num_cpus),
                f"trainer.validation_data_dir={hydra_value(str(root / 'generations'))}"]
    return TargetRun(target, root, argv)


def read_dump(data_dir: Path) -> list[dict]:
    """verl's validation dump (`<dir>/<step>.jsonl`, the newest file) as rows; [] when absent."""
    files = sorted(glob.glob(str(data_dir / "*.jsonl")), key=os.path.getmtime)
    if not files:
        return []
    rows = []
    with open(files[-1], encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn last line: the rest still counts
    return rows


def _gsm8k_scorer():
    """verl's `reward_score/gsm8k.py`, loaded from its file: importing it as `verl.utils...` would import
    verl's package `__init__` (torch, Ray) just to run two regular expressions."""
    found = importlib.util.find_spec("verl")
    if found is None or not found.origin:
        return None
    path = Path(found.origin).parent / "utils" / "reward_score" / "gsm8k.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_verl_gsm8k_score", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.compute_score


def flexible_scores(rows: Sequence[Mapping]) -> dict[str, float] | None:
    """Question id → mean score of its generations under verl's `method="flexible"` (None without verl)."""
    score = _gsm8k_scorer()
    if score is None:
        return None
    return question_means(rows, lambda row: score(str(row.get("output", "")), str(row.get("gts")), method="flexible"))


def say(line: str) -> None:
    """A marker line on stdout, where verl's own lines go: the order in the pod log is the truth."""
    print(line, flush=True)


def run_targets(spec: ExperimentSpec, targets: Sequence[Target], *, env: Mapping[str, str], run: RunFn,
                log: Callable[[str], None], attempt: str, ray_num_cpus: int | None, cwd: str | None) -> int:
    """Merge, evaluate each target in turn and report per-question scores; the first failure's status.

    A failed model does not stop the next one (its result is still worth having), but a signal does.
    """
    first_failure = 0
    for target in targets:
        if target.step is not None:
            code = ensure_merged(spec, target.step, env=env, run=run, log=log)
            if code != 0:
                say(done_line(target.label, code))
                first_failure = first_failure or code
                if code > 128:
                    return code
                continue
        tr = target_run(spec, target, attempt=attempt, ray_num_cpus=ray_num_cpus, env=env)
        shutil.rmtree(tr.data_dir, ignore_errors=True)
        tr.root.mkdir(parents=True, exist_ok=True)
        child_env = {**env, "VERL_FILE_LOGGER_PATH": str(tr.file_logger), "LAUNCHER_EVAL_LABEL": target.label,
                     "LAUNCHER_EVAL_MODEL": target.model, "LAUNCHER_EVAL_DATA_DIR": str(tr.data_dir)}
        say(marker_line(target.label, model=target.model, step=target.step))
        log(f"starting verl (eval, model={target.label}): {shlex.join(tr.argv)}")
        code = run(tr.argv, child_env, name=f"verl eval {target.label}", cwd=cwd)
        log(f"verl (eval, model={target.label}) exited with status {code}")
        rows = read_dump(tr.data_dir) if code == 0 else []
        if rows:
            say(questions_line(questions_payload(target.label, rows, flexible_scores(rows))))
        elif code == 0:
            log(f"warning: no validation dump in {tr.data_dir}; per-question results unavailable")
        say(done_line(target.label, code))
        if code != 0:
            first_failure = first_failure or code
            if code > 128:
                return code
    return first_failure


def plan_text(spec: ExperimentSpec, targets: Sequence[Target], *, env: Mapping[str, str],
              ray_num_cpus: int | None) -> str:
    """What `--dry-run` adds in eval mode: the merge and verl command per model, in order."""
    lines = ["# eval plan"]
    for t in targets:
        if t.step is not None:
            lines.append(f"# merge (unless {merged_dir(spec, t.step)} is complete)")
            lines.append(shlex.join(merge_command(actor_dir(spec, t.step), merged_dir(spec, t.step), env)))
        elif t.label == "checkpoint":
            lines.append("# merge global_step_<latest> (read from latest_checkpointed_iteration.txt at run time)")
        lines.append(f"# verl (model={t.label})")
        lines.append(shlex.join(target_run(spec, t, attempt="<attempt>", ray_num_cpus=ray_num_cpus, env=env).argv))
    return "\n".join(lines)


def driver_argv(config: str, *, baseline: bool, checkpoint: str | None) -> list[str]:
    """The head pod's child command in a multi-node PyTorchJob (runs `main` below, attached to Ray)."""
    argv = ["python3", "-m", "launcher.entrypoint.eval", "--config", config]
    if baseline:
        argv.append("--baseline")
    if checkpoint is not None:
        argv += ["--checkpoint", checkpoint]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m launcher.entrypoint.eval --config FILE [--baseline] [--checkpoint STEP|latest]`.

    The evaluation sequence alone, for a process already attached to a Ray cluster (RAY_ADDRESS):
    no role detection, no data preparation (the entrypoint that started it did both).
    """
    from launcher.spec.load import load_spec
    from launcher.entrypoint.runner import DEFAULT_GRACE_S, log, run_child

    p = argparse.ArgumentParser(prog="python -m launcher.entrypoint.eval")
    p.add_argument("--config", required=True)
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--checkpoint", default=None)
    args = p.parse_args(argv)
    env = dict(os.environ)
    try:
        spec = load_spec(args.config)
        targets = plan(spec, baseline=args.baseline, checkpoint=args.checkpoint)

        def run(a, e, *, name, cwd=None):
            return run_child(a, e, name=name, grace_s=DEFAULT_GRACE_S, cwd=cwd)

        return run_targets(spec, targets, env=env, run=run, log=log, attempt=attempt_id(env),
                           ray_num_cpus=None, cwd=os.getcwd())
    except LauncherError as exc:
        print(f"[entrypoint] error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
