"""`report` on runs produced end to end on the local cluster, and `compare` of grpo-exp3 with grpo-exp4.

Both experiments are submitted and followed to Succeeded while their pods serve a simulated verl log
of the matching shape (n and max response length); report and compare then work on the run
directories the launcher wrote.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kwok_support as ks
from launcher_helpers import REPO, cri, run_launcher

pytestmark = pytest.mark.cluster
STEPS = 8


def _run(info, ns: str, runs: Path, exp: str, n: int, max_len: int) -> Path:
    import simlog
    from launcher.spec.load import load_spec

    ann = json.dumps({ks.POD_COMPLETE_DELAY: "12s"})
    sets = [f"trainer.total_training_steps={STEPS}", f"scheduling.pod_annotations={ann}",
            f"scheduling.namespace={ns}"]
    config = REPO / "configs" / f"{exp}.yaml"
    job = load_spec(config, sets).job_name
    lines = [ln.rstrip("\n") for ln in simlog.generate(steps=STEPS, n=n, max_response_length=max_len, seed=n)]
    ks.serve_logs(info, ns, f"{job}-master-0", cri(lines))
    argv = ["submit", str(config), "--follow"] + [a for s in sets for a in ("--set", s)]
    rc, out, err = run_launcher(argv, info, runs, timeout=180)
    assert rc == 0, err[-2000:]
    run = runs / job
    assert len((run / "metrics.jsonl").read_text().splitlines()) == STEPS
    return run


def test_report_and_compare_on_end_to_end_runs(kube_cluster, namespace, tmp_path):
    runs = tmp_path / "runs"
    exp3 = _run(kube_cluster, namespace, runs, "grpo-exp3", n=2, max_len=256)
    exp4 = _run(kube_cluster, namespace, runs, "grpo-exp4", n=4, max_len=512)

    for run in (exp3, exp4):
        rc, out, err = run_launcher(["report", str(run)], kube_cluster, runs)
        assert rc == 0, err
        doc = json.loads((run / "report.json").read_text())
        assert doc["training_steps"] == STEPS and doc["windows"]["steady"]["first_step"] == 2
        spec_gpus = doc["throughput"]["gpus_expected"]
        assert spec_gpus == 2 and round(doc["throughput"]["gpus_implied"]) == 2
        assert (run / "score.png").stat().st_size > 10_000

    out_dir = tmp_path / "cmp"
    rc, out, err = run_launcher(["compare", str(exp3), str(exp4), "-o", str(out_dir)], kube_cluster, runs)
    assert rc == 0, err
    md = (out_dir / "compare.md").read_text()
    assert "grpo-exp3 vs grpo-exp4" in md
    # what changed between the two configs is named
    assert "data.max_response_length" in md and "rollout.n" in md
    assert any(p.suffix == ".png" and p.stat().st_size > 10_000 for p in out_dir.iterdir())
