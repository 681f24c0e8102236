"""MLflow tracking from inside real pods: the smoke experiment (configs/smoke-cpu.yaml, workload smoke) on the
real kubelet node logs its steps through verl's own `Tracking` to an MLflow server this test starts.

The server (`mlflow server`, SQLite in a temporary directory) listens on the host's bridge address of the first
real node, grpo0's 10.244.0.1 (read from `ip addr`), not on loopback: a pod reaches the host only at a bridge
gateway (10.244.<i>.1), and the host delivers a packet for any of its own addresses, so pods on either node
reach it. Needs the CPU image built with docker/requirements-tracking.lock (the MLflow client) and the entrypoint
of this change: run it after `make image-cpu`.
"""
from __future__ import annotations

import json
import re
import uuid

import pytest

import realnode as rn
from launcher_helpers import run_launcher
from mlflow_server import mlflow_server

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.smallpods]


@pytest.fixture(scope="module")
def real_node(kube_cluster):
    rn.ensure_real_node(kube_cluster)
    return kube_cluster


# RayJob: its pods log through Ray's workers; a PyTorchJob's pods log to MLflow in test_real_faults_training_e2e.py's
# real training run (the real-node tests run one after another: CI's critical path)
@pytest.mark.parametrize("backend", ["rayjob"])
def test_smoke_run_logs_its_steps_to_mlflow_from_inside_the_pod(real_node, namespace, tmp_path, backend):
    from mlflow import MlflowClient

    from launcher.spec.load import load_spec
    from launcher.export.mlflow_export import mlflow_key

    info, ns, runs = real_node, namespace, tmp_path / "runs"
    with mlflow_server(tmp_path / "mlflow", host=rn.bridge_address()) as uri:
        experiment = f"real-node-{uuid.uuid4().hex[:8]}"
        sets = [f"backend={backend}", "tracking.mlflow.enabled=true", f"tracking.mlflow.tracking_uri={uri}",
                f"tracking.mlflow.experiment={experiment}"]
        spec = load_spec(rn.SMOKE, [f"scheduling.namespace={ns}", *sets])
        args = ["submit", rn.SMOKE, "-n", ns, "--follow", *[a for s in sets for a in ("--set", s)]]
        rc, out, err = run_launcher(args, info, runs, timeout=600)
        logs = {p.stem: p.read_text(errors="replace") for p in sorted((runs / spec.job_name / "logs").glob("*.log"))}
        assert rc == 0, f"{err[-3000:]}\nlogs: {json.dumps({k: v[-2000:] for k, v in logs.items()})}"
        driver = next(t for t in logs.values() if "[smoke] result" in t)
        assert re.search(r"\[smoke\] check tracking ok 3 step\(s\) logged through verl's Tracking \(mlflow\)", driver), \
            driver[-3000:]
        assert re.search(r"mlflow: run [0-9a-f]{32} \(created\)", "\n".join(logs.values()))

        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment)
        runs_found = client.search_runs([exp.experiment_id])
        assert len(runs_found) == 1
        run = runs_found[0]
        assert run.data.tags["grpo.launcher.io/job"] == spec.job_name and run.info.run_name == spec.name
        rows = [json.loads(line) for line in (runs / spec.job_name / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2, 3]
        keys = sorted({k for r in rows for k in r if k != "step"})
        assert "smoke/allreduce_ms" in keys and "timing_s/step" in keys
        before = {}
        for key in keys:
            history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, mlflow_key(key)))
            assert history == [(r["step"], float(r[key])) for r in rows if key in r], key
            before[key] = history

        # the launcher-side export finds the pod's run by its job tag and has no step left to send
        rc, out, err = run_launcher(["export", str(runs / spec.job_name), "--mlflow", uri, "--mlflow-experiment",
                                     experiment, "-o", "json"], info, runs, timeout=120)
        assert rc == 0, err
        sent = json.loads(out)["mlflow"]
        assert sent["run_id"] == run.info.run_id and sent["created"] is False
        after = client.get_run(run.info.run_id).data.metrics
        summary = [k for k in after if k.startswith("report/")]
        assert sent["metrics"] == len(summary) > 0  # the report's figures only: every step was already there
        for key in keys:
            assert sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, mlflow_key(key))) \
                == before[key]
