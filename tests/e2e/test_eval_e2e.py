"""End-to-end on the local control plane: `launcher eval` renders jobs the API server accepts (server-side
dry run, both backends), and an evaluation job followed to Succeeded yields eval.json and the report's
GSM8K evaluation section from the pod's log (verl's validation lines behind the entrypoint's markers)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import kwok_support as ks

# tests/eval_support.py is shared with the unit tests (tests/report/test_eval_report.py); pytest puts only
# this file's own directory on sys.path, so add its parent explicitly.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval_support import eval_log, per_question, sorted_by_id  # noqa: E402
from launcher_helpers import CONFIG, raw_lines, run_launcher, serve_run

pytestmark = pytest.mark.cluster
CLAIM = "grpo-ckpt"


def _bound_claim(kube_cluster, ns: str) -> str:
    """A PVC bound to a static hostPath PV, as the eval pod mounts one."""
    pv = f"{ns}-ckpt"
    ks.bound_hostpath_claim(kube_cluster, ns, CLAIM, pv, f"/tmp/{pv}")
    return pv


@pytest.mark.parametrize("backend", ["pytorchjob", "rayjob"])
def test_eval_job_passes_server_side_dry_run(kube_cluster, namespace, tmp_path, backend):
    rc, out, err = run_launcher(["eval", CONFIG, "-n", namespace, "--backend", backend, "--baseline",
                                 "--checkpoint", "25", "--set", f"storage.claim_name={CLAIM}", "--dry-run=server"],
                                kube_cluster, tmp_path)
    assert rc == 0, err
    assert "grpo-exp3-eval-" in out and "app.kubernetes.io/component: eval" in out
    kind = "pytorchjobs" if backend == "pytorchjob" else "rayjobs"
    assert kube_cluster.kubectl("-n", namespace, "get", f"configmaps,{kind}", "-l",
                                "app.kubernetes.io/component=eval", "-o", "name").stdout.strip() == ""


def test_eval_follow_writes_eval_json_and_the_report_section(kube_cluster, namespace, tmp_path):
    from launcher.cli.commands.eval import models_key
    from launcher.spec.load import load_spec
    from launcher.spec.names import eval_job_name

    ns, runs = namespace, tmp_path / "runs"
    pv = _bound_claim(kube_cluster, ns)
    try:
        ann = json.dumps({ks.POD_COMPLETE_DELAY: "12s"})
        sets = ["--set", f"storage.claim_name={CLAIM}", "--set", f"scheduling.pod_annotations={ann}"]
        spec = load_spec(CONFIG, [f"scheduling.namespace={ns}", f"storage.claim_name={CLAIM}",
                                  f"scheduling.pod_annotations={ann}"])
        job = eval_job_name(spec, models_key(True, "latest"))
        base, ckpt = per_question(300, 0.55, 1), per_question(300, 0.75, 2)
        lines = eval_log(base=base, ckpt=ckpt)
        served = serve_run(kube_cluster, ns, f"{job}-master-0", lines, initial=3)
        live = served.start(interval=0.3)
        try:
            rc, out, err = run_launcher(["eval", CONFIG, "-n", ns, "--baseline", "--checkpoint", "latest",
                                         *sets, "--follow"], kube_cluster, runs, timeout=180)
        finally:
            live.stop()
        assert rc == 0, err[-3000:]
        assert f"submitted evaluation PyTorchJob {job}" in out
        run = runs / job
        assert raw_lines(run / "logs" / f"{job}-master-0.log") == lines
        doc = json.loads((run / "eval.json").read_text())
        assert doc["base"]["questions"]["strict"] == sorted_by_id(base)
        assert doc["checkpoint"]["questions"]["strict"] == sorted_by_id(ckpt)
        assert doc["checkpoint"]["step"] == 25
        assert "wrote" in err and "eval.json" in err

        rc, out, err = run_launcher(["report", str(run), "--no-plots"], kube_cluster, runs)
        assert rc == 0, err
        md = (run / "report.md").read_text()
        assert "## GSM8K evaluation: base vs trained" in md and "paired bootstrap over 300 questions" in md
        section = json.loads((run / "report.json").read_text())["sections"]["evaluation"]
        assert section["difference"]["estimate"] == pytest.approx(sum(ckpt) / 300 - sum(base) / 300)

        # resubmitting the same evaluation attaches instead of starting another job
        rc, out, err = run_launcher(["eval", CONFIG, "-n", ns, "--baseline", "--checkpoint", "latest", *sets],
                                    kube_cluster, runs)
        assert rc == 0 and "attaching" in err
    finally:
        kube_cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)
