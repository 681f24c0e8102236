"""`launcher sweep`: grid parsing and expansion, naming, bad input (exit 2 before any cluster call), rendered
output, submit/attach and --max-parallel scheduling against a fake API (the real cluster: tests/e2e/test_sweep_e2e.py),
and the sweep report's ranking and intervals."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from launcher.cli.main import main
from launcher.spec.load import load_spec
from launcher.errors import BadInput
from launcher.run.sweep import MAX_MEMBERS, expand, parse_grid, split_values

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
GRID = ["rollout.n=2,4", "data.max_response_length=256,512"]


# grid parsing ---------------------------------------------------------------------------------------------------

def test_split_values_keeps_commas_inside_brackets_and_quotes():
    assert split_values("2, 4,8") == ["2", "4", "8"]
    assert split_values('[a, b],{k: v, j: w},"x,y",\'p,q\'') == ["[a, b]", "{k: v, j: w}", '"x,y"', "'p,q'"]


@pytest.mark.parametrize("items,sets,needle", [
    (["rollout.n"], [], "expected KEY=V1,V2"),
    (["=2,4"], [], "expected KEY=V1,V2"),
    (["rollout.n=2,,4"], [], "empty one"),
    (["rollout.n=2,4,2"], [], "'2' is listed more than once"),
    (["rollout.n=2", "rollout.n=4"], [], "given twice"),
    (["rollout.n=2,4"], ["rollout.n=8"], "also given with --set rollout.n"),
    (["scheduling.tolerations[x].key=a,b"], [], "--grid"),
    (["scheduling.namespace=a,b"], [], "one namespace"),
    ([], [], "at least one --grid"),
])
def test_parse_grid_refuses_bad_axes_naming_them(items, sets, needle):
    with pytest.raises(BadInput) as exc:
        parse_grid(items, sets)
    assert needle in str(exc.value)
    for item in items[:1]:
        assert item.partition("=")[0] in str(exc.value) or not item.partition("=")[0]


# expansion and naming -------------------------------------------------------------------------------------------

def test_expand_is_the_cross_product_with_the_set_machinery_and_naming():
    sweep = expand(CONFIG, parse_grid(GRID), ["trainer.total_training_steps=6"])
    combos = [(m.params["rollout.n"], m.params["data.max_response_length"]) for m in sweep.members]
    assert combos == [(2, 256), (2, 512), (4, 256), (4, 512)]  # first axis slowest, in the order given
    for m, (n, length) in zip(sweep.members, combos):
        assert m.spec.rollout.n == n and m.spec.data.max_response_length == length
        assert m.spec.trainer.total_training_steps == 6
        # the same name `submit --set ...` would give: a re-run finds the same jobs
        same = load_spec(CONFIG, ["trainer.total_training_steps=6", f"rollout.n={n}",
                                  f"data.max_response_length={length}"])
        assert m.job == same.job_name == f"grpo-exp3-{same.config_hash()}"
    assert len({m.job for m in sweep.members}) == 4 and len({m.spec.config_hash() for m in sweep.members}) == 4
    assert sweep.varied == ["rollout.n", "data.max_response_length"]
    assert sweep.name.startswith("grpo-exp3-sweep-")
    again = expand(CONFIG, parse_grid(GRID), ["trainer.total_training_steps=6"])
    assert again.name == sweep.name and [m.job for m in again.members] == [m.job for m in sweep.members]
    other = expand(CONFIG, parse_grid(["rollout.n=2,8", GRID[1]]), ["trainer.total_training_steps=6"])
    assert other.name != sweep.name


def test_sweep_document_lists_members_and_varied_params():
    sweep = expand(CONFIG, parse_grid(["rollout.n=2,4"]))
    doc = sweep.document(lambda job: Path("runs") / job)
    assert doc["kind"] == "Sweep" and doc["name"] == sweep.name and doc["grid"] == {"rollout.n": [2, 4]}
    assert doc["varied"] == ["rollout.n"]
    assert [(m["job"], m["params"], m["run_dir"]) for m in doc["members"]] == [
        (m.job, {"rollout.n": m.spec.rollout.n}, str(Path("runs") / m.job)) for m in sweep.members]


def test_expand_names_the_bad_key_or_value():
    with pytest.raises(BadInput) as exc:
        expand(CONFIG, parse_grid(["rollout.nn=2,4"]))
    assert "--grid rollout.nn" in str(exc.value) and "known key" in str(exc.value)
    with pytest.raises(BadInput) as exc:
        expand(CONFIG, parse_grid(["rollout.n=2,lots"]))
    assert "--grid rollout.n: value 'lots'" in str(exc.value)
    with pytest.raises(BadInput) as exc:  # alone refused by a rule: the value is named, and why
        expand(CONFIG, parse_grid(["data.train_batch_size=8,4"]))
    assert "--grid data.train_batch_size: value '4'" in str(exc.value) and "ppo_mini_batch_size" in str(exc.value)


def test_expand_refuses_values_that_are_the_same_config_and_huge_grids():
    with pytest.raises(BadInput) as exc:
        expand(CONFIG, parse_grid(["rollout.n=2,2.0"]))
    assert "same config" in str(exc.value) and "rollout.n=2.0" in str(exc.value)
    many = ",".join(str(i) for i in range(1, 10))
    with pytest.raises(BadInput) as exc:
        expand(CONFIG, parse_grid([f"rollout.n={many}", f"trainer.total_training_steps={many}"]))
    assert f"at most {MAX_MEMBERS}" in str(exc.value)


# the verb: bad input and rendered output ------------------------------------------------------------------------

@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A kubeconfig whose server does not exist: any cluster call would fail with exit 3, not 2."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "x",
                                  "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
                                  "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                                  "users": [{"name": "x", "user": {"token": "t"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kc))
    monkeypatch.setenv("LAUNCHER_RUNS_DIR", str(tmp_path / "runs"))
    return kc


@pytest.mark.parametrize("argv,needle", [
    (["--grid", "rollout.nn=2,4"], "rollout.nn"),
    (["--grid", "rollout.n=2,many"], "'many'"),
    (["--grid", "rollout.n=2,4", "--grid", "rollout.n=8"], "given twice"),
    (["--grid", "rollout.n=2,4", "--queue", "q", "--max-parallel", "1"], "not with a Kueue queue"),
    (["--grid", "rollout.n=2,4", "--max-parallel", "0"], "--max-parallel"),
    (["--grid", "rollout.n=2,4", "--gitops"], "--gitops"),
    (["--grid", "rollout.n=2,4", "--metric", "score"], "--metric"),
    (["--grid", "rollout.n=2,4", "-d", "json"], "-d/--output-dir"),
    ([], "at least one --grid"),
])
def test_sweep_bad_input_exits_2_before_any_cluster_call(nowhere, tmp_path, capsys, argv, needle):
    assert main(["sweep", CONFIG, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert not (tmp_path / "runs").exists()


def test_sweep_dry_run_prints_every_run(capsys):
    assert main(["sweep", CONFIG, "--grid", GRID[0], "--grid", GRID[1], "--dry-run"]) == 0
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d]
    jobs = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert len(jobs) == 4 and len({j["metadata"]["name"] for j in jobs}) == 4
    specs = [yaml.safe_load(d["data"]["spec.yaml"]) for d in docs if d["kind"] == "ConfigMap"]
    assert sorted((s["rollout"]["n"], s["data"]["max_response_length"]) for s in specs) == [
        (2, 256), (2, 512), (4, 256), (4, 512)]
    assert "4 run(s) over rollout.n, data.max_response_length" in err


def test_sweep_output_dir_gitops_and_stale_members(tmp_path, capsys):
    out = tmp_path / "gitops"
    ttl = ["--set", "run_policy.ttl_seconds_after_finished=600"]
    assert main(["sweep", CONFIG, "--grid", GRID[0], "--grid", GRID[1], *ttl, "-d", str(out), "--gitops"]) == 0
    doc = json.loads((out / "sweep.json").read_text())
    assert len(doc["members"]) == 4
    for m in doc["members"]:
        files = sorted(p.name for p in (out / m["job"]).iterdir())
        assert files and all(f[:2].isdigit() for f in files)
        job = yaml.safe_load((out / m["job"] / files[-1]).read_text())
        assert job["kind"] == "PyTorchJob" and "ttlSecondsAfterFinished" not in json.dumps(job["spec"])
    assert main(["sweep", CONFIG, "--grid", GRID[0], *ttl, "-d", str(out)]) == 0  # a smaller grid, no --gitops
    kept = json.loads((out / "sweep.json").read_text())["members"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(m["job"] for m in kept)
    job = yaml.safe_load(next((out / kept[0]["job"]).glob("*pytorchjob*")).read_text())
    assert "ttlSecondsAfterFinished" in json.dumps(job["spec"])


# submit/attach and --max-parallel against the fake API ---------------------------------------------------------

def _runner(tmp_path, grid=GRID):
    from kube_fakes import FakeKube
    from launcher.cli.commands.sweep import SweepRunner
    from launcher.render.manifests import render

    sweep = expand(CONFIG, parse_grid(grid), ["scheduling.namespace=ns"])
    kube = FakeKube("ns")
    rendered = {m.job: render(m.spec) for m in sweep.members}
    return SweepRunner(kube, sweep, rendered, str(tmp_path / "runs"), err=lambda m: None), kube, sweep


def test_start_creates_once_then_attaches(tmp_path, capsys):
    runner, kube, sweep = _runner(tmp_path)
    m = sweep.members[0]
    runner.start(m)
    created = [k for k in kube.objects if m.job in str(k)]
    assert created and (tmp_path / "runs" / m.job / "spec.yaml").is_file()
    assert "submitted PyTorchJob" in capsys.readouterr().out
    runner.start(m)
    assert [k for k in kube.objects if m.job in str(k)] == created
    assert "attached to PyTorchJob" in capsys.readouterr().out


def test_max_parallel_follows_at_most_n_at_a_time(tmp_path, monkeypatch):
    from launcher.kube.jobs import JobState

    runner, kube, sweep = _runner(tmp_path)
    lock, active, peak, order = threading.Lock(), [], [0], []

    def fake_follow(member, ref):
        with lock:
            active.append(member.job)
            peak[0] = max(peak[0], len(active))
            order.append(member.job)
        # a run ends only once two are being followed (or no other is left): a third must wait for it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with lock:
                if active[0] == member.job and (len(active) == 2 or len(order) == 4):
                    active.pop(0)
                    break
            time.sleep(0.01)
        runner.done.put((member.job, JobState("Succeeded", True, True, ""), None))

    monkeypatch.setattr(runner, "_follow", fake_follow)
    results = runner.run_all(2)
    assert peak[0] == 2 and order == [m.job for m in sweep.members]
    assert all(st.succeeded for st in results.values()) and len(results) == 4


# the report ---------------------------------------------------------------------------------------------------

def _run_dir(root: Path, job: str, scores: list[float], n: int, length: int) -> Path:
    d = root / job
    d.mkdir(parents=True)
    rows = [{"step": i + 1, "critic/score/mean": s, "timing_s/step": 10.0 + n + i, "response_length/mean": length / 2,
             "response_length/clip_ratio": 0.1, "perf/total_num_tokens": 1000.0, "perf/throughput": 50.0}
            for i, s in enumerate(scores)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "spec.yaml").write_text(yaml.safe_dump({"name": "grpo-exp3", "rollout": {"n": n},
                                                 "data": {"max_response_length": length}}))
    return d


def _sweep_doc(members):
    return {"name": "grpo-exp3-sweep-x", "varied": ["rollout.n", "data.max_response_length"],
            "members": [{"job": j, "params": {"rollout.n": n, "data.max_response_length": ln}}
                        for j, n, ln in members]}


def test_report_ranks_by_metric_with_t_intervals(tmp_path):
    from scipy import stats

    from launcher.report.load import load_run
    from launcher.report.sweep import sweep_report, write_sweep_report

    spec = [("a", 2, 256, [0.0, 0.20, 0.25, 0.22, 0.24]), ("b", 4, 256, [0.0, 0.60, 0.62, 0.58, 0.61]),
            ("c", 2, 512, [0.0, 0.40, 0.45, 0.42, 0.41]), ("d", 4, 512, [0.0, 0.70, 0.10, 0.90, 0.30])]
    runs = {j: load_run(_run_dir(tmp_path, j, s, n, ln)) for j, n, ln, s in spec}
    doc = sweep_report(_sweep_doc([(j, n, ln) for j, n, ln, _ in spec]), runs, warmup_steps=1)
    assert [r["job"] for r in doc["runs"]] == ["b", "d", "c", "a"] and [r["rank"] for r in doc["runs"]] == [1, 2, 3, 4]
    steady = np.array([0.60, 0.62, 0.58, 0.61])
    half = stats.t.ppf(0.975, 3) * steady.std(ddof=1) / 2
    assert doc["best"]["job"] == "b" and doc["best"]["mean"] == pytest.approx(steady.mean())
    assert doc["best"]["ci95"] == pytest.approx([steady.mean() - half, steady.mean() + half])
    assert doc["best"]["separated"] is False  # d's wide interval overlaps b's: said so
    assert any("not clear-cut" in n for n in doc["notes"])
    assert set(doc["config_diff"]) == {"rollout.n", "data.max_response_length"}
    # lower is better for step time: a (n=2) ranks first, by its steady step-time mean
    by_time = sweep_report(_sweep_doc([(j, n, ln) for j, n, ln, _ in spec]), runs, metric="timing_s/step")
    assert by_time["goal"] == "min" and by_time["runs"][0]["params"]["rollout.n"] == 2
    # a member that logged nothing is listed, unranked
    doc2, written = write_sweep_report(_sweep_doc([(j, n, ln) for j, n, ln, _ in spec] + [("e", 8, 256)]),
                                       runs, tmp_path / "out", {"b": {"phase": "Succeeded"}})
    assert doc2["runs"][-1]["job"] == "e" and doc2["runs"][-1]["rank"] is None
    md = written["sweep.md"].read_text()
    assert "Best by `critic/score/mean`" in md and "`b`" in md and "`rollout.n`" in md and "| 1 | `b` |" in md
    assert (tmp_path / "out" / "compare_metrics.png").stat().st_size > 10_000


def test_report_with_no_run_that_logged_a_step_ranks_nothing(tmp_path):
    from launcher.report.sweep import write_sweep_report

    doc, written = write_sweep_report(_sweep_doc([("a", 2, 256), ("b", 4, 256)]), {}, tmp_path / "out",
                                      {"a": {"phase": "Failed"}})
    assert doc["best"] is None and [r["rank"] for r in doc["runs"]] == [None, None]
    assert len([n for n in doc["notes"] if "no metrics.jsonl" in n]) == 2
    assert "nothing ranked" in written["sweep.md"].read_text()


def test_mean_ci_edges():
    from launcher.report.sweep import mean_ci

    assert mean_ci([]) == {"mean": None, "std": None, "n": 0, "ci95": None}
    assert mean_ci([1.0, float("nan")]) == {"mean": 1.0, "std": None, "n": 1, "ci95": None}
    lo, hi = mean_ci([1.0, 2.0, 3.0])["ci95"]
    assert lo < 2.0 < hi


def test_compare_takes_n_runs_named_by_job_when_experiments_repeat(tmp_path, capsys):
    for j, n, ln in (("grpo-exp3-aaaa1111", 2, 256), ("grpo-exp3-bbbb2222", 4, 256), ("grpo-exp3-cccc3333", 4, 512)):
        _run_dir(tmp_path, j, [0.1, 0.2, 0.3, 0.4], n, ln)
    out = tmp_path / "cmp"
    dirs = [str(tmp_path / j) for j in ("grpo-exp3-aaaa1111", "grpo-exp3-bbbb2222", "grpo-exp3-cccc3333")]
    assert main(["compare", *dirs, "-d", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["runs"]] == ["grpo-exp3-aaaa1111", "grpo-exp3-bbbb2222", "grpo-exp3-cccc3333"]
    assert doc["config_diff"] == {"data.max_response_length": [256, 256, 512], "rollout.n": [2, 4, 4]}
    assert (out / "compare_metrics.png").is_file()


def test_sweep_view_one_line_per_run_per_new_step_off_a_terminal_and_a_table_on_one():
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from launcher.kube.jobs import JobState
    from launcher.cli.progress import SweepView

    sweep = expand(CONFIG, parse_grid(["rollout.n=2,4"]))
    a, b = (m.job for m in sweep.members)
    buf = io.StringIO()
    view = SweepView(sweep, console=Console(file=buf, width=300))
    rec = lambda step, score: SimpleNamespace(step=step, metrics={"critic/score/mean": score})  # noqa: E731
    with view:
        view.status(a, JobState("Running", False, False, ""), [])
        view.records(a, [rec(1, 0.25)])
        view.records(a, [rec(1, 0.25)])  # the same step again: no new line
        view.records(b, [rec(0, 0.9)])  # step 0 is validation, not progress
        view.status(a, JobState("Succeeded", True, True, ""), [])
    lines = buf.getvalue().splitlines()
    assert lines == [f"{a} (rollout.n=2) | step -/25 | Running", f"{a} (rollout.n=2) | step 1/25 | "
                     "critic/score/mean 0.25 | Running", f"{b} (rollout.n=4) | step -/25 | Pending",
                     f"{a} (rollout.n=2) | step 1/25 | critic/score/mean 0.25 | Succeeded"]
    tty = io.StringIO()
    view = SweepView(sweep, console=Console(file=tty, width=200, force_terminal=True))
    with view:
        view.records(b, [rec(3, 0.5)])
    text = tty.getvalue()
    assert "sweep: 0/2 finished" in text and a in text and "3/25" in text and "0.5" in text
