"""Real verl training runs for the e2e tests of resume, the watchdog and incidents (grpo-exp3-cpu on the real
nodes): the fixtures (the real node, a hostPath volume for checkpoints) and helpers shared by
test_real_faults_training_e2e.py and test_real_incidents_e2e.py (separate files so `--dist loadfile` runs them on
different workers)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

import kwok_support as ks
import realnode as rn
from faults import STOP_ACTOR_IN_UPDATE, STOP_ENGINE  # hack/faults.py
from launcher_helpers import launcher, rows

CONFIG = str(ks.REPO_ROOT / "configs" / "grpo-exp3-cpu.yaml")
CLAIM = "grpo-faults-volume"


@pytest.fixture(scope="module")
def real_node(kube_cluster):
    rn.ensure_real_node(kube_cluster)
    return kube_cluster


@pytest.fixture
def volume(real_node, namespace):
    host = Path(f"/tmp/{namespace}-volume")
    host.mkdir(mode=0o777)
    host.chmod(0o777)
    ks.bound_hostpath_claim(real_node, namespace, CLAIM, f"{namespace}-volume", str(host), access="ReadWriteMany")
    yield host
    real_node.kubectl("delete", "pv", f"{namespace}-volume", "--wait=false", check=False)
    shutil.rmtree(host, ignore_errors=True)


# The job's deadline is a hang guard, counted from the job's start across its restarts: the slowest of these runs
# (the kill-and-resume test, one restart) took 665 s under load (bench/RESULTS.md, s10): 1200 s was under 2x, and a
# slow machine could end a healthy run. The tests' own waits end a hung test first; this ends a job a test left.
DEADLINE_S = 3600


def sets_for(steps: int, *more: str) -> list[str]:
    return [f"trainer.total_training_steps={steps}", f"trainer.total_epochs={math.ceil(steps / 3)}",
            f"storage.claim_name={CLAIM}", f"run_policy.active_deadline_seconds={DEADLINE_S}", *more]


class Following:
    """`submit --follow` in the background, its output in files (a real run prints more than a pipe holds)."""

    def __init__(self, info, ns, runs: Path, sets: list[str], *extra: str):
        runs.mkdir(parents=True, exist_ok=True)
        self.out, self.err = runs / "follow.out", runs / "follow.err"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = launcher(["submit", CONFIG, "-n", ns, "--follow", *extra,
                                  *[a for s in sets for a in ("--set", s)]], info, runs, stdout=out, stderr=err)

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        if kind is not None:  # the test failed while the run was going: stop following, show what it said
            self.proc.kill()
            self.proc.wait()
            print(self.err.read_text(errors="replace")[-3000:])

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code, stderr)."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return self.proc.returncode, self.err.read_text(errors="replace")


def master(info, ns) -> dict:
    return rn.pods(info, ns, "training.kubeflow.org/replica-type=master")[0]




def stop_vllm_engine(info, ns) -> str:
    """SIGSTOP vLLM's engine-core process in the trainer pod (a hung generation engine); its pid."""
    pod = master(info, ns)
    out = info.kubectl("exec", "-n", ns, pod["metadata"]["name"], "-c", "pytorch", "--", "python3", "-c",
                       STOP_ENGINE).stdout.split()
    assert len(out) == 1, out
    return out[0]


def stop_actor_in_update(info, ns, within_s: int = 300) -> tuple[str, str]:
    """SIGSTOP the actor's worker process while it is inside its update (hack/faults.py); (its pid, the stack seen)."""
    pod = master(info, ns)
    out = info.kubectl("exec", "-n", ns, pod["metadata"]["name"], "-c", "pytorch", "--", "python3", "-c",
                       STOP_ACTOR_IN_UPDATE, str(within_s), timeout=within_s + 60).stdout
    pid, _, stack = out.partition("\n")
    return pid.strip(), stack


def checkpointed(volume: Path, step: int) -> bool:
    """verl wrote latest_checkpointed_iteration.txt with `step` (its checkpoint is complete)."""
    return any(p.read_text().strip() == str(step) for p in volume.glob("checkpoints/**/latest_checkpointed_iteration.txt"))


def logged_steps(run) -> set[int]:
    """The steps in the follower's metrics.jsonl so far (a line it is still writing is not one yet)."""
    p = run / "metrics.jsonl"
    lines = p.read_text().splitlines() if p.exists() else []
    return {json.loads(x)["step"] for x in lines if x.endswith("}")}


def file_logger_rows(volume: Path) -> list[dict]:
    """verl's FileLogger records (`{"step": N, "data": {...}}` per line), from the run's volume: the entrypoint points
    VERL_FILE_LOGGER_PATH at <checkpoint path>/metrics/<pod>.jsonl; only the pod that runs verl's driver writes one."""
    found: list[dict] = []
    for path in sorted(volume.glob("checkpoints/**/metrics/*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def hydra_configs(volume: Path) -> list[dict]:
    """The config verl's own Hydra saved at each start of verl's driver (`<cwd>/outputs/<day>/<time>/.hydra/
    config.yaml`; the entrypoint starts verl in the run's checkpoint directory, on the volume), oldest first: what verl
    composed from the override list, written by verl, whatever the launcher's capture of its printed config made of it."""
    import yaml

    paths = sorted(volume.glob("checkpoints/**/outputs/*/*/.hydra/config.yaml"), key=lambda p: p.parts[-4:-2])
    return [yaml.safe_load(p.read_text()) for p in paths]


def verl_file_logger(volume: Path) -> dict[int, dict]:
    """`file_logger_rows` by step (step -> data); where a resumed attempt logged a step again, its record (the later
    line) wins."""
    return {rec["step"]: rec["data"] for rec in file_logger_rows(volume)}


def incidents(run: Path) -> list[dict]:
    return [{**json.loads(p.read_text()), "dir": p.parent} for p in sorted(run.glob("incidents/*/incident.json"))]


def same(a: object, b: object) -> bool:
    """The launcher's value `a` against verl's file logger's `b` (orjson writes NaN as null)."""
    if b is None:
        return a is None or (isinstance(a, float) and math.isnan(a))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def assert_rows_are_verls(mine: list[dict], verl: dict[int, dict]) -> None:
    """Every step's row of metrics.jsonl holds exactly the keys verl's file logger recorded for it (a key missing on
    either side fails), each with verl's value."""
    assert [r["step"] for r in mine] == sorted(verl), ([r["step"] for r in mine], sorted(verl))
    for r in mine:
        data = verl[r["step"]]
        assert set(r) - {"step"} == set(data) - {"step"}, (r["step"], sorted(set(r) ^ set(data)))
        diff = {k: (r[k], x) for k, x in data.items() if k != "step" and not same(r[k], x)}
        assert not diff, (r["step"], diff)


def check_resumed(run: Path, volume: Path, steps: int, save: int, lost: int = 0) -> tuple[list[dict], str]:
    """A run that was stopped after its global_step_`save` checkpoint (and at least `lost` steps after it) and
    completed `steps` in a second attempt, judged by what verl recorded: its load line and global step say it resumed
    from global_step_`save`; its file logger holds the first attempt's steps, then the resumed attempt's from `save` + 1
    (the steps logged after the checkpoint were lost and done again: at least `lost`, at most `save`, the save_freq);
    metrics.jsonl has each step once, equal to verl's records (the resumed attempt's for a step it redid); the
    launcher's attempts.json says the same. Returns (the launcher's rows, the pods' raw logs)."""
    from launcher.run.attempts import load, summarise

    raw = "".join(p.read_text(errors="replace") for p in (run / "logs").glob("*.log"))
    # verl's own lines: the first attempt found no checkpoint, the second set its step counter from global_step_`save`
    # (TaskRunnerV1) and its actor loaded that step's shard (the FSDP worker, rank 0)
    assert raw.count("Training from scratch") == 1, raw[-3000:]
    assert re.search(rf"Resuming from \S*/global_step_{save}, setting global step to {save}\b", raw), raw[-3000:]
    assert re.search(rf"\[Rank 0\] Loaded model from \S*/global_step_{save}/actor/model_world_size_", raw), raw[-3000:]
    attempts = summarise(load(run))
    assert [a["action"] for a in attempts] == ["fresh", "resume"], attempts
    first, second = attempts
    assert second["resumed_from"] == save and second["first_step"] == save + 1 and second["last_step"] == steps, \
        attempts
    # verl's file logger, line by line: attempt 1's steps 1..k, then the resumed attempt's from save + 1
    k = first["last_step"]
    logged = [rec["step"] for rec in file_logger_rows(volume)]
    assert logged == list(range(1, k + 1)) + list(range(save + 1, steps + 1)), (k, logged)
    assert save + lost <= k < 2 * save, (k, save, lost)  # stopped after the checkpoint, before the next one
    assert second["steps_lost"] == k - save, second

    mine = rows(run)
    assert [r["step"] for r in mine] == list(range(1, steps + 1)), [r["step"] for r in mine]  # each step once
    assert_rows_are_verls(mine, verl_file_logger(volume))
    assert f"attempt 2: resuming from global_step_{save}" in raw, raw[-3000:]
    return mine, raw
