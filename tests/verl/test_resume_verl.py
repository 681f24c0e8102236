"""The entrypoint's resume decision on real verl 0.9.1 FSDP checkpoints, and its overrides under verl's own Hydra config.

`_resume_ckpt_worker.py` saves a tiny FSDP1 model twice (global_step_2, global_step_4, world size 2) with verl's
own `FSDPCheckpointManager` under `torchrun --nproc_per_node=2` (gloo, CPU), exactly the files a training run
leaves. For each case the entrypoint runs as in the pod (`--dry-run` for the decision and the verl command it
would start; a real start, with verl replaced by a stand-in, for a finished run): its command line is then
composed with verl's `ppo_trainer` config and validated by verl's `validate_config`, as `main_ppo` does.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.spec.load import dump_spec, load_spec
from launcher.entrypoint import resume as RS
from launcher.entrypoint.__main__ import VERL_COMMAND, main
from launcher.entrypoint.environment import ContainerProbe

from verl_harness import compose, validate

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBE = ContainerProbe(cpus=2, memory_bytes=8 << 30, shm_bytes=1 << 30)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A directory with verl's real global_step_2 and global_step_4 (world size 2) and its tracker."""
    root = tmp_path_factory.mktemp("resume-verl") / "saved"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--nproc_per_node=2", "--master_port=29519",
                           str(HERE / "_resume_ckpt_worker.py"), str(root)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


def _run(tmp_path: Path, saved: Path | None, *, dry: bool = True, drop: str | None = None, **env_extra):
    """A spec whose checkpoint directory holds a copy of `saved` (minus `drop`); the entrypoint's output."""
    spec = load_spec(REPO / "configs" / "grpo-exp3.yaml",
                     [f"trainer.checkpoint_dir={tmp_path / 'ckpt'}", "storage.claim_name=ckpts"])
    ckpt = Path(spec.checkpoint_path)
    if saved is not None and not ckpt.exists():
        shutil.copytree(saved, ckpt)
        if drop:
            (ckpt / drop).unlink()
    config = tmp_path / "spec.yaml"
    config.write_text(dump_spec(spec))
    env = {"HOME": str(tmp_path), "POD_NAME": "run-master-0", "PATH": os.environ.get("PATH", ""),
           "LAUNCHER_ATTEMPT": "a", **env_extra}
    code = main(["--config", str(config), *(["--dry-run"] if dry else [])], container_env=env, probe=PROBE,
                prepare=lambda *a, **k: None, grace_s=5)
    return spec, code


def _verl_command(out: str) -> list[str]:
    lines = out.splitlines()
    argv = shlex.split(lines[lines.index("# command") + 1])
    assert argv[: len(VERL_COMMAND)] == VERL_COMMAND
    return argv[len(VERL_COMMAND):]


def _decision(out: str) -> str:
    lines = out.splitlines()
    return lines[next(i for i, ln in enumerate(lines) if ln.startswith("# resume")) + 1]


def _composed(overrides: list[str]):
    cfg = compose(overrides)
    assert validate(cfg) == (False, False)  # main_ppo's validation accepts it (GRPO: no reference, no critic)
    return cfg


def test_fresh_run(tmp_path, capsys):
    spec, code = _run(tmp_path, None)
    out = capsys.readouterr().out
    assert code == 0
    assert _decision(out) == "attempt 1: starting fresh (no checkpoint yet); steps lost: 0"
    cfg = _composed(_verl_command(out))
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.default_local_dir == spec.checkpoint_path


def _started(tmp_path, saved, **kw):
    """A real start (verl replaced by a stand-in that exits 0): the decision is applied to the volume."""
    return _run(tmp_path, saved, dry=False, LAUNCHER_CHILD_CMD=f"{sys.executable} -c pass", **kw)


def test_restart_with_a_complete_checkpoint_resumes_from_it(tmp_path, capsys, saved):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    spec, code = _run(tmp_path, saved)
    out = capsys.readouterr().out
    ckpt = Path(spec.checkpoint_path)
    assert code == 0 and RS.missing_files(ckpt / "global_step_4", 2) == []  # verl's own files, all of them
    assert _decision(out).startswith("attempt 1: resuming from global_step_4;")
    # verl gets its own auto, the same on every attempt; its reading of its tracker is the decision
    cfg = _composed(_verl_command(out))
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.resume_from_path is None
    assert find_latest_ckpt_path(str(ckpt)) == str(ckpt / "global_step_4")


def test_newest_checkpoint_missing_a_ranks_shard_falls_back_to_the_previous(tmp_path, capfd, saved):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    spec, code = _started(tmp_path, saved, drop="global_step_4/actor/model_world_size_2_rank_1.pt")
    err = capfd.readouterr().err
    ckpt = Path(spec.checkpoint_path)
    assert code == 0
    assert "attempt 1: resuming from global_step_2 (global_step_4 skipped: incomplete for world size 2, missing " \
           "actor/model_world_size_2_rank_1.pt)" in err
    # verl's auto, reading its tracker as its trainer does (`_load_checkpoint`), now resumes from global_step_2
    assert find_latest_ckpt_path(str(ckpt)) == str(ckpt / "global_step_2")


def test_rerun_of_a_finished_run_trains_nothing(tmp_path, capfd, saved):
    marker = tmp_path / "verl-ran"
    child = f"{sys.executable} -c 'open(\"{marker}\", \"a\").write(\"ran\\n\")'"
    spec, code = _run(tmp_path, saved, dry=False, LAUNCHER_CHILD_CMD=child)
    first = capfd.readouterr().err
    assert code == 0 and marker.read_text() == "ran\n"
    assert "attempt 1: resuming from global_step_4" in first and "run finished at step 4" in first
    spec, code = _run(tmp_path, saved, dry=False, LAUNCHER_CHILD_CMD=child)
    second = capfd.readouterr().err
    assert code == 0 and marker.read_text() == "ran\n"  # the stand-in for verl did not run again
    assert "[entrypoint] attempt 2: already finished at global_step_4" in second
    # and the dry run of a third start says the same, with no verl command to compose
    _run(tmp_path, saved)
    out = capfd.readouterr().out
    assert _decision(out).startswith("attempt 3: already finished at global_step_4")  # two starts recorded
