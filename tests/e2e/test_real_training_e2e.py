"""Real verl GRPO training on the local cluster's real nodes: configs/grpo-exp3-cpu.yaml, nothing simulated.

verl 0.9.1's own trainer runs in the CPU image (vLLM's CPU build, the project's verl CPU platform, the built-in tiny
Qwen2): rollout, reward, GRPO advantages, the FSDP2 update and the weight sync, on PyTorchJob (1 and 2 nodes) and
TrainJob (2 nodes). The launcher's
`metrics.jsonl` (parsed from the pods' console lines) is checked against verl's own file logger, read from the run's
volume (a hostPath PersistentVolume, so it outlives the pods): every step, every key, same values.

The whole experiment (25 steps, one node) is `make run`'s: tests/e2e/test_make_run_e2e.py runs it once and checks it
with `check_real_training` below, then evaluates its checkpoint with `launcher eval` (base and trained, verl's merger
and validation): one real run serves both (issue 43's scenarios).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import real_run_ledger
import realnode as rn
from launcher_helpers import rows, run_launcher
from real_runs import CLAIM, CONFIG, DEADLINE_S, assert_rows_are_verls, file_logger_rows, hydra_configs
from real_runs import real_node, volume  # noqa: F401 (fixtures)
from launcher.spec.contract import REWARD_FILE_PATH

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


# The e2e reward file's two scores: exact in binary, and neither 0, 1 nor the CPU image's shaping term's 0.5 × share.
REWARD_EVEN, REWARD_ODD = 0.6875, 0.3125
USER_DATA_DIR = "/workspace/data/doubling"


def write_user_dataset(directory: Path) -> Path:
    """A user's own dataset in verl's schema: 24 training questions (3 batches of 8, as the GSM8K fixture), 8 to
    validate."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir()
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}? Put the answer after ####."}],
             "data_source": "user/doubling", "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(2 * i)}, "extra_info": {"split": "x", "index": i}}
            for i in range(32)]
    pq.write_table(pa.Table.from_pylist(rows[:24]), directory / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[24:]), directory / "test.parquet")
    return directory


def slope(values: list[float]) -> float:
    n = len(values)
    mx, my = (n - 1) / 2, sum(values) / n
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / sum((i - mx) ** 2 for i in range(n))


@pytest.mark.parametrize("backend,nodes,steps", [
    pytest.param("pytorchjob", 2, 3, marks=pytest.mark.wholenodes),  # FSDP across two pods over gloo
    # RayJob: head + workers on the two nodes. It once hung when TransferQueue pinned its storage unit to the head
    # (the first Ray node by id), whose one CPU verl's TaskRunner held: spec.verl requires a node with a logical GPU
    # for it
    pytest.param("rayjob", 2, 3, marks=pytest.mark.wholenodes),
    pytest.param("trainjob", 2, 3, marks=pytest.mark.wholenodes),  # Trainer v2: JobSet, 2 nodes
])
def test_grpo_exp3_cpu_trains_for_real(real_node, namespace, volume, tmp_path, backend, nodes, steps):
    from launcher.spec.load import load_spec

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    sets = [f"backend={backend}", f"resources.nodes={nodes}", f"trainer.total_training_steps={steps}",
            f"trainer.total_epochs={math.ceil(steps / 3)}", f"storage.claim_name={CLAIM}",
            f"run_policy.active_deadline_seconds={DEADLINE_S}"]  # a hang guard (real_runs.DEADLINE_S)
    # a verl setting no typed field names (issue 30's verl.overrides), on one of the short runs: verl must get it
    own = ["actor_rollout_ref.rollout.max_num_batched_tokens=2048"] if backend == "trainjob" else []
    # the user's own experiment (issue 30) on another: a reward function from a local file, whose scores no built-in
    # rule gives, and a parquet dataset put on the run's volume with `launcher data put`
    user_data = backend == "pytorchjob" and nodes == 2
    if user_data:
        (tmp_path / "my_reward.py").write_text(
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
            f"    return {REWARD_EVEN} if len(solution_str) % 2 == 0 else {REWARD_ODD}\n")
        sets += [f"reward.function.path={tmp_path / 'my_reward.py'}", "data.dataset=parquet", "data.source_dir=null",
                 f"data.dir={USER_DATA_DIR}"]
        local = write_user_dataset(tmp_path / "my-data")
        rc, out, err = run_launcher(["data", "put", CONFIG, str(local), "-n", ns,
                                     *[a for s in sets for a in ("--set", s)]], info, runs, timeout=600)
        assert rc == 0, out + err
        assert out.count(" bytes verified on arrival (sha256 ") == 2 and "train.parquet: sent; " in out, out
        for f in local.iterdir():  # on the run's volume as they were here
            assert (volume / USER_DATA_DIR.removeprefix("/workspace/") / f.name).read_bytes() == f.read_bytes()
        assert rn.pods(info, ns, "app.kubernetes.io/component=data") == []  # the copy pod is gone
    spec = load_spec(CONFIG, [f"scheduling.namespace={ns}", *sets, *(f"verl.overrides+={o}" for o in own)])
    rc, out, err = run_launcher(["submit", CONFIG, "-n", ns, "--follow", *[a for s in sets for a in ("--set", s)],
                                 *[a for o in own for a in ("--verl", o)]], info, runs, timeout=1800)
    run = runs / spec.job_name
    logs = {p.stem: p.read_text(errors="replace") for p in sorted((run / "logs").glob("*.log"))}
    assert rc == 0, f"{err[-3000:]}\nlogs: {json.dumps({k: v[-3000:] for k, v in logs.items()})}"
    assert "Real training (tiny model on CPU)" in err + out, (err + out)[-2000:]
    check_real_training(info, ns, runs, spec, volume, steps, nodes, user_data=user_data, own=own)


def check_real_training(info, ns, runs, spec, volume, steps, nodes, *, user_data=False, own=()) -> None:
    """What a finished real run of `spec` (in `ns`, its run directory under `runs`, verl's files on `volume`) must
    show, judged by what verl and Kubernetes recorded: its steps, verl's file logger equal to the launcher's metrics,
    the config verl composed, an FSDP shard per rank, the pods' nodes, no watchdog finding, a real report; a run of 25
    steps or more also a rising score."""
    run = runs / spec.job_name
    logs = {p.stem: p.read_text(errors="replace") for p in sorted((run / "logs").glob("*.log"))}
    # verl's own console lines, parsed by the launcher: one row per real step
    mine = rows(run)
    assert [r["step"] for r in mine] == list(range(1, steps + 1)), [r["step"] for r in mine]
    # ...and the suite's ledger of real runs (the summary `make test` prints) finds this run in its pods' logs
    (seen,) = [r for r in real_run_ledger.real_runs(info.api_client(), ns) if r["job"] == spec.job_name]
    assert seen["steps"] == steps and seen["nodes"] and seen["seconds"] > 0, seen
    # ...equal to verl's own file logger of the same run, for every step and every key
    verl = file_logger_rows(volume)
    assert [r["step"] for r in verl] == list(range(1, steps + 1)), [r["step"] for r in verl]
    assert_rows_are_verls(mine, {r["step"]: r["data"] for r in verl})
    assert "actor/entropy" in mine[0] and "critic/score/mean" in mine[0], sorted(mine[0])
    # the follower's watchdog ran with its default settings on real timings (step 1's warm-up included): a healthy
    # run leaves no finding, and the watchdog saw every step with its checks on (what it recorded, watchdog.json)
    assert not (run / "findings.jsonl").exists(), (run / "findings.jsonl").read_text()
    watched = json.loads((run / "watchdog.json").read_text())
    assert (watched["steps_seen"], watched["first_step"], watched["last_step"], watched["reported"]) == (
        steps, 1, steps, []), watched
    assert all(watched["checks"][c]["on"] for c in ("stall", "reward_collapse", "entropy_collapse", "clip_jump",
                                                    "nonfinite", "no_signal")), watched["checks"]
    every = "\n".join(logs.values())  # every pod's saved log
    # the config verl composed, as verl's own Hydra saved it on the volume (one start of verl's driver); the launcher's
    # verl_config.json is put back together from verl's printed config, which Ray forwards in pieces (it once lost
    # one: a CI-like run, 2026-12-05), so it is compared where it exists but decides nothing alone
    (composed,) = hydra_configs(volume)
    assert composed["trainer"]["total_training_steps"] == steps and composed["trainer"]["nnodes"] == nodes, \
        composed["trainer"]
    # ...and trained on `nodes` pods on as many nodes, one FSDP rank each: every rank saved its own shard of the last
    # step's update (a renderer that made one replica fails here and on the nodes the pods ran on)
    shards = sorted(p.name for p in volume.glob(f"checkpoints/**/global_step_{steps}/actor/model_world_size_*.pt"))
    assert shards == [f"model_world_size_{nodes}_rank_{r}.pt" for r in range(nodes)], shards
    assert len(seen["nodes"]) == nodes, seen
    saved = run / "verl_config.json"
    verl_config = json.loads(saved.read_text())["config"] if saved.exists() else None
    if user_data:  # ...scored by the user's file, from the ConfigMap, on the user's rows, checked before training
        for r in mine:
            assert {r["critic/score/min"], r["critic/score/max"]} <= {REWARD_EVEN, REWARD_ODD}, r
        assert f"data: {USER_DATA_DIR}/train.parquet: 24 rows, columns prompt, data_source, ability, reward_model, " \
               "extra_info" in every, every[-3000:]
        assert composed["reward"]["custom_reward_function"]["path"] == REWARD_FILE_PATH, composed["reward"]
        assert composed["data"]["train_files"] == f"{USER_DATA_DIR}/train.parquet", composed["data"]
        if verl_config is not None:
            assert verl_config["reward"]["custom_reward_function"]["path"] == REWARD_FILE_PATH
            assert verl_config["data"]["train_files"] == f"{USER_DATA_DIR}/train.parquet"
    if own:  # ...acted on by verl: its vLLM server started with it (verl prints the server's arguments)
        assert re.search(r"'--max_num_batched_tokens',\n\([^)]*\) +'2048',", every), every[-3000:]
        assert json.loads((run / "provenance.json").read_text())["verl_overrides"] == own
        assert composed["actor_rollout_ref"]["rollout"]["max_num_batched_tokens"] == 2048, composed["actor_rollout_ref"]
        if verl_config is not None:
            assert verl_config["actor_rollout_ref"]["rollout"]["max_num_batched_tokens"] == 2048

    rc, out, err = run_launcher(["report", str(run)], info, runs, timeout=300)
    assert rc == 0, err
    report = json.loads((run / "report.json").read_text())
    md = (run / "report.md").read_text()
    assert report["execution"]["simulated"] is False
    assert report["execution"]["headline"] == "real training (tiny model on CPU)"
    assert md.splitlines()[0].startswith("# Real training (tiny model on CPU)")
    assert "simulated" not in md.splitlines()[0].lower()
    if steps >= 25:
        scores = [r["critic/score/mean"] for r in mine]
        assert slope(scores) > 0, scores
        # ...and the report's trend figure says so
        assert report["trend"]["direction"] == "rising", report["trend"]
        assert "**Score trend: rising**" in md
        assert sum(scores[-5:]) > sum(scores[:5]), scores


VAL_ROWS = 12  # the CPU image's GSM8K fixture: 24 train + 12 test rows


def eval_of_the_real_checkpoint(info, ns, runs, config, spec, volume, step) -> None:
    """`launcher eval --baseline --checkpoint latest` of the run's real FSDP2 checkpoint (saved at its last step):
    verl's own model merger writes the Hugging Face model, then verl's validation (vLLM on CPU) runs for the base and
    the trained model; eval.json and the report's evaluation section show both, with the interval of their
    difference. The tiny random model answers no GSM8K question, so both are expected near 0: the mechanism is
    judged (a real merge, a validation dump of every question for each model, the paired interval), not a gain."""
    from launcher.cli.commands.eval import models_key
    from launcher.spec.names import eval_job_name

    actor = [d for d in volume.glob(f"checkpoints/**/global_step_{step}/actor") if d.is_dir()]
    assert len(actor) == 1, sorted(str(p) for p in volume.rglob("global_step_*"))
    rc, out, err = run_launcher(["eval", str(config), "-n", ns, "--baseline", "--checkpoint", "latest", "--follow"],
                                info, runs, timeout=1800)
    run = runs / eval_job_name(spec, models_key(True, "latest"))
    logs = "\n".join(p.read_text(errors="replace") for p in sorted((run / "logs").glob("*.log")))
    assert rc == 0, f"{err[-3000:]}\n{logs[-4000:]}"
    merged = actor[0] / "hf_merged"  # verl's merger's output, complete (config and weights), nothing half-written
    assert (merged / "config.json").is_file() and list(merged.glob("*.safetensors")), sorted(merged.iterdir())
    assert not list(actor[0].glob("hf_merged.partial-*"))

    doc = json.loads((run / "eval.json").read_text())
    assert doc["checkpoint"]["step"] == step, doc["checkpoint"]
    for label in ("base", "checkpoint"):
        strict = doc[label]["questions"]["strict"]
        assert len(strict) == VAL_ROWS and all(0.0 <= float(x) <= 1.0 for x in strict), (label, strict)

    rc, out, err = run_launcher(["report", str(run), "--no-plots"], info, runs, timeout=300)
    assert rc == 0, err
    md = (run / "report.md").read_text()
    assert "## GSM8K evaluation: base vs trained" in md and f"paired bootstrap over {VAL_ROWS} questions" in md, md
    section = json.loads((run / "report.json").read_text())["sections"]["evaluation"]
    assert set(section["models"]) == {"base", "checkpoint"}, section
    assert all(m["accuracy"] is not None and m["status"] == 0 for m in section["models"].values()), section
    assert section["models"]["checkpoint"]["step"] == step
    diff = section["difference"]
    assert "paired bootstrap" in diff["method"] and diff["ci"][0] <= diff["estimate"] <= diff["ci"][1], diff
