"""The entrypoint's resume decision (launcher.entrypoint.resume) on checkpoint layouts laid out as verl leaves them,
the override list it produces, per-run checkpoint directories, and `submit --new`'s start over.

The shard files here are empty placeholders named exactly as verl 0.9.1's FSDPCheckpointManager names them;
tests/verl/test_resume_verl.py makes the same decisions on real checkpoints written by verl itself."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from launcher.spec.load import dump_spec, load_spec
from launcher.entrypoint import resume as RS
from launcher.entrypoint.__main__ import main
from launcher.entrypoint.environment import ContainerProbe
from launcher.render.manifests import render
from launcher.spec.verl import verl_overrides

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"
PROBE = ContainerProbe(cpus=2, memory_bytes=8 << 30, shm_bytes=1 << 30)


def _spec(tmp_path, *sets):
    return load_spec(EXP3, [f"trainer.checkpoint_dir={tmp_path / 'ckpt'}", *sets])


def lay_out(ckpt: Path, step: int, world: int = 2, *, drop: tuple[str, ...] = (), tracker: bool = True) -> Path:
    """global_step_N as verl writes it for `world` ranks, minus the files named in `drop`."""
    d = ckpt / f"global_step_{step}"
    (d / "actor" / "huggingface").mkdir(parents=True, exist_ok=True)
    for rank in range(world):
        for kind in RS.SHARD_KINDS:
            (d / "actor" / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"x")
    (d / "actor" / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))
    (d / "data.pt").write_bytes(b"x")
    for name in drop:
        (d / name).unlink()
    if tracker:
        (ckpt / RS.TRACKER).write_text(str(step))
    return d


def log_steps(ckpt: Path, name: str, steps) -> None:
    """verl's file logger: one `{"step": N, "data": {...}}` row per step (notes/verl.md §5)."""
    (ckpt / "metrics").mkdir(parents=True, exist_ok=True)
    (ckpt / "metrics" / f"{name}.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"actor/loss": 0.1}}) + "\n" for s in steps))


def test_checkpoint_dir_is_per_run_and_two_configs_never_share_one(tmp_path):
    a = _spec(tmp_path)
    b = _spec(tmp_path, "rollout.n=4")
    assert a.checkpoint_path.endswith(f"/verl_grpo_gsm8k/{a.job_name}")
    assert a.job_name != b.job_name and a.checkpoint_path != b.checkpoint_path
    assert not a.checkpoint_path.startswith(b.checkpoint_path) and not b.checkpoint_path.startswith(a.checkpoint_path)
    # the same config always lands in the same directory (a restarted pod finds its own checkpoints)
    assert _spec(tmp_path).checkpoint_path == a.checkpoint_path
    ov = dict(o.split("=", 1) for o in verl_overrides(a))
    assert ov["trainer.default_local_dir"] == a.checkpoint_path
    assert ov["trainer.save_freq"] == "25" and dict(
        o.split("=", 1) for o in verl_overrides(_spec(tmp_path, "trainer.save_freq=5")))["trainer.save_freq"] == "5"


def test_fresh_run(tmp_path):
    spec = _spec(tmp_path)
    d = RS.decide(spec)
    assert (d.action, d.attempt, d.path, d.steps_lost) == ("fresh", 1, None, 0)
    assert d.line() == "attempt 1: starting fresh (no checkpoint yet); steps lost: 0"


def test_restart_resumes_from_the_newest_complete_checkpoint(tmp_path):
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 5)
    lay_out(ckpt, 10)
    log_steps(ckpt, "attempt-1", range(1, 14))
    (ckpt / RS.ATTEMPTS).write_text(json.dumps({"attempt": 1}) + "\n")
    d = RS.decide(spec)
    assert (d.action, d.attempt, d.step, d.path) == ("resume", 2, 10, str(ckpt / "global_step_10"))
    assert d.steps_lost == 3 and d.last_logged == 13
    assert d.line() == ("attempt 2: resuming from global_step_10; steps lost: 3 "
                        "(an earlier attempt logged up to step 13)")


@pytest.mark.parametrize("drop", ["actor/model_world_size_2_rank_1.pt", "actor/optim_world_size_2_rank_0.pt",
                                  "actor/extra_state_world_size_2_rank_1.pt", "data.pt"])
def test_an_incomplete_newest_save_is_skipped_for_the_previous_one(tmp_path, drop):
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 5)
    lay_out(ckpt, 10, drop=(drop,))
    d = RS.decide(spec)
    assert (d.action, d.step) == ("resume", 5)
    assert len(d.skipped) == 1 and "global_step_10 skipped" in d.skipped[0] and drop in d.skipped[0]


def test_shards_of_another_world_size_do_not_count(tmp_path):
    spec = _spec(tmp_path)  # 1 node x 2 GPUs: world size 2
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 10, world=4)
    d = RS.decide(spec)
    assert d.action == "fresh" and "world size 2" in d.skipped[0]


def test_a_save_newer_than_the_tracker_is_not_trusted(tmp_path):
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 5)
    lay_out(ckpt, 10, tracker=False)  # verl writes the tracker last: the step-10 save never finished
    assert RS.decide(spec).step == 5


def test_rerun_of_a_finished_run_and_the_other_modes(tmp_path):
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 25)
    first = RS.decide(spec)
    RS.finish(spec, first, 0, log=lambda m: None)
    d = RS.decide(spec)
    assert (d.action, d.step) == ("finished", 25)
    assert "already finished at global_step_25" in d.line() and "submit --new" in d.line()
    # a failed verl leaves no marker
    other = _spec(tmp_path, "rollout.n=4")
    RS.finish(other, RS.decide(other), 1, log=lambda m: None)
    assert not (Path(other.checkpoint_path) / RS.FINISHED).exists()
    # disable ignores checkpoints and the marker alike
    off = _spec(tmp_path, "trainer.resume_mode=disable")
    lay_out(Path(off.checkpoint_path), 10)
    assert RS.decide(off).action == "fresh"


def test_verl_gets_the_specs_resume_mode_on_every_attempt(tmp_path):
    """The same two keys whatever the decision: verl's trackers log them as run parameters on every start, and
    MLflow refuses a parameter that changes within a run (a resumed attempt would log nothing)."""
    spec = _spec(tmp_path)
    auto = dict(o.split("=", 1) for o in verl_overrides(spec))
    assert auto["trainer.resume_mode"] == "auto" and "trainer.resume_from_path" not in auto
    off = _spec(tmp_path, "trainer.resume_mode=disable")
    assert dict(o.split("=", 1) for o in verl_overrides(off))["trainer.resume_mode"] == "disable"
    path = f"{spec.checkpoint_path}/global_step_10"
    given = dict(o.split("=", 1) for o in verl_overrides(
        _spec(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={path}")))
    assert given["trainer.resume_mode"] == "resume_path" and given["trainer.resume_from_path"] == path


def test_the_tracker_names_the_decision_for_verls_auto(tmp_path):
    """verl's `auto` reads its tracker file; a start makes it name the checkpoint the launcher chose (the newest
    complete one), and sets it aside when the start is fresh. A tracker that already agrees is not rewritten."""
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 5)
    lay_out(ckpt, 10, drop=("data.pt",))  # the newest save is incomplete; the tracker names it
    said = []
    d = RS.begin(spec, {}, log=said.append)
    assert (d.action, d.step) == ("resume", 5)
    assert RS.read_tracker(ckpt) == 5 and "latest_checkpointed_iteration.txt: 10 -> 5" in "\n".join(said)
    before = (ckpt / RS.TRACKER).stat().st_mtime_ns
    said.clear()
    d = RS.begin(spec, {}, log=said.append)  # agrees now: left alone
    assert (d.action, d.step) == ("resume", 5) and (ckpt / RS.TRACKER).stat().st_mtime_ns == before
    assert not [m for m in said if RS.TRACKER in m]

    (ckpt / "global_step_5" / "data.pt").unlink()  # nothing complete left: fresh, and verl must not resume
    d = RS.begin(spec, {}, log=said.append)
    assert d.action == "fresh" and RS.read_tracker(ckpt) is None
    assert (ckpt / f"{RS.TRACKER}.skipped-attempt-3").read_text() == "5"

    off = _spec(tmp_path, "trainer.resume_mode=disable", "rollout.n=4")  # another run; disable touches nothing
    lay_out(Path(off.checkpoint_path), 5)
    RS.begin(off, {}, log=said.append)
    assert RS.read_tracker(Path(off.checkpoint_path)) == 5


def _entrypoint(spec, tmp_path, capfd, **env):
    config = tmp_path / "spec.yaml"
    config.write_text(dump_spec(spec))
    argv_file = tmp_path / "argv.json"
    child = f"{sys.executable} -c 'import json,sys; json.dump(sys.argv[1:], open(\"{argv_file}\", \"w\"))'"
    base = {"HOME": str(tmp_path), "POD_NAME": "p-master-0", "PATH": "/usr/bin:/bin", "LAUNCHER_ATTEMPT": "a1",
            "LAUNCHER_CHILD_CMD": child}
    code = main(["--config", str(config)], container_env={**base, **env}, probe=PROBE,
                prepare=lambda *a, **k: None, grace_s=5)
    return code, capfd.readouterr().err, argv_file


def test_entrypoint_records_each_attempt_and_skips_a_finished_run(tmp_path, capfd):
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    code, err, ran = _entrypoint(spec, tmp_path, capfd)
    assert code == 0 and ran.exists()
    assert "[entrypoint] attempt 1: starting fresh (no checkpoint yet); steps lost: 0" in err
    assert (ckpt / RS.FINISHED).is_file()
    ran.unlink()
    code, err, ran = _entrypoint(spec, tmp_path, capfd)
    assert code == 0 and not ran.exists()  # verl never started
    assert "[entrypoint] attempt 2: already finished at global_step_25" in err
    records = [json.loads(x) for x in (ckpt / RS.ATTEMPTS).read_text().splitlines()]
    assert [(r["attempt"], r["action"]) for r in records] == [(1, "fresh"), (2, "finished")]
    assert records[0]["pod"] == "p-master-0"


def test_start_over_token_sets_earlier_contents_aside_once(tmp_path, capfd):
    spec = _spec(tmp_path)
    ckpt = Path(spec.checkpoint_path)
    lay_out(ckpt, 25)
    RS.finish(spec, RS.decide(spec), 0, log=lambda m: None)
    code, err, ran = _entrypoint(spec, tmp_path, capfd, LAUNCHER_START_OVER="20261201T000000Z")
    assert code == 0 and ran.exists()
    assert "attempt 1: starting fresh" in err and "started over (submit --new)" in err
    aside = ckpt / "superseded-20261201T000000Z"
    assert (aside / "global_step_25" / "data.pt").is_file() and (aside / RS.FINISHED).is_file()
    assert not (ckpt / "global_step_25").exists()
    # the same submission's pod restarting (same token) resumes normally instead of starting over again
    (ckpt / RS.FINISHED).unlink()
    lay_out(ckpt, 5)
    code, err, ran = _entrypoint(spec, tmp_path, capfd, LAUNCHER_START_OVER="20261201T000000Z")
    assert "attempt 2: resuming from global_step_5" in err and "started over" not in err
    assert (ckpt / "global_step_5").is_dir() and ran.exists()


def test_submit_new_renders_the_start_over_token_into_every_pod():
    spec = load_spec(EXP3)
    for backend in ("pytorchjob", "rayjob"):
        s = load_spec(EXP3, backend=backend)
        plain = render(s)
        tok = render(s, start_over="T1")
        # every pod that runs the image's entrypoint or Ray (KubeRay's submitter only runs `ray job submit`)
        envs = [c["env"] for c in _containers(tok) if any(e["name"] == "LAUNCHER_SPEC" for e in c.get("env") or [])]
        assert len(envs) == (1 if backend == "pytorchjob" else 2)
        assert all({"name": RS.START_OVER_ENV, "value": "T1"} in e for e in envs)
        assert not any(RS.START_OVER_ENV in json.dumps(o) for o in plain)
    assert spec.job_name == load_spec(EXP3).job_name  # the token is not part of the config (same run)


def _containers(objs):
    out = []

    def walk(x):
        if isinstance(x, dict):
            if "containers" in x:
                out.extend(x["containers"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(objs)
    return out


def test_after_verl_exits_0_the_entrypoint_says_what_checkpoint_is_on_the_volume(tmp_path):
    """One line doctor --rehearse reads (launcher.spec.contract.checkpoint_line): the newest global_step_N whole (every
    rank's actor files and data.pt), or what it lacks, or none at all."""
    from launcher.spec.contract import read_checkpoint_line

    spec = _spec(tmp_path)  # grpo-exp3: 2 GPUs, 2 ranks
    ckpt = Path(spec.checkpoint_path)
    said: list[str] = []
    RS.finish(spec, RS.decide(spec), 0, log=said.append)
    assert read_checkpoint_line(f"[entrypoint] {said[0]}") == (None, False, f"{ckpt}"), said
    lay_out(ckpt, 5)
    lay_out(ckpt, 10, drop=("actor/optim_world_size_2_rank_1.pt",))
    said.clear()
    RS.finish(spec, RS.decide(spec), 0, log=said.append)
    assert said[0] == "checkpoint global_step_10 on the volume: incomplete, missing actor/optim_world_size_2_rank_1.pt"
    assert read_checkpoint_line(f"x [entrypoint] {said[0]}")[:2] == (10, False)
    (ckpt / "global_step_10" / "actor" / "optim_world_size_2_rank_1.pt").write_bytes(b"y" * 2_000_000)
    said.clear()
    RS.finish(spec, RS.decide(spec), 0, log=said.append)
    assert said[0] == "checkpoint global_step_10 on the volume: complete (8 files, 2.0 MB)", said
    assert read_checkpoint_line(f"[entrypoint] {said[0]}")[:2] == (10, True)
