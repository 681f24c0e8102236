#!/usr/bin/env python3
"""Metric latency: from a verl step line appearing in a pod's log to its row in metrics.jsonl.

On the local control plane (`make cluster-up`): submits grpo-exp3 into a fresh namespace with a KWOK
run time long enough for the measurement, serves the pod's log from a CRI file (KWOK `Logs`), runs
the real `launcher logs NAME -f` as a subprocess, then N times: appends one `step:N - ...` line to the
served file (time t0) and polls runs/<job>/metrics.jsonl until that step's row is there (time t1).
Reports median / p95 / max of t1 - t0.

    .venv/bin/python bench/bench_latency.py [--lines 40] [--interval 0.5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "hack"), str(REPO / "tests" / "e2e")]

import kwok_support as ks  # noqa: E402
import simlog  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=40, help="metric lines to time (default 40)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between appended lines (default 0.5)")
    a = ap.parse_args()
    info = ks.identify_cluster()
    if info is None:
        print("no local cluster: run `make cluster-up` first", file=sys.stderr)
        return 2
    from kubernetes import client

    api = info.api_client()
    core = client.CoreV1Api(api)
    ns = f"bench-latency-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels={ks.E2E_NAMESPACE_LABEL: ns})))
    ks.wait_for(lambda: core.read_namespaced_service_account("default", ns), 60, what="default serviceaccount")
    runs = Path(tempfile.mkdtemp(prefix="bench-runs-"))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(info.kubeconfig), LAUNCHER_RUNS_DIR=str(runs), PYTHONPATH=str(REPO / "src"))
    steps = a.lines
    run_s = int(a.lines * (a.interval + 0.5) + 30)
    ann = json.dumps({ks.POD_COMPLETE_DELAY: f"{run_s}s"})
    sets = [f"trainer.total_training_steps={steps}", f"scheduling.pod_annotations={ann}"]
    from launcher.spec.load import load_spec

    job = load_spec(REPO / "configs" / "grpo-exp3.yaml", [f"scheduling.namespace={ns}", *sets]).job_name
    pod = f"{job}-master-0"
    metrics = list(simlog.step_metrics(steps=steps, seed=11))
    header = [ln.rstrip("\n") for ln in simlog.generate(steps=0, seed=11)][:-1]
    served = ks.serve_logs(info, ns, pod, "".join(
        f"{ks._ts(ks.dt.datetime.now(ks.dt.timezone.utc) - ks.dt.timedelta(seconds=1) + ks.dt.timedelta(microseconds=i))}"
        f" stdout F {ln}\n" for i, ln in enumerate(header)))
    follower = None
    latencies: list[float] = []
    try:
        sub = subprocess.run([sys.executable, "-m", "launcher", "submit", str(REPO / "configs" / "grpo-exp3.yaml"),
                              "-n", ns, *sum((["--set", s] for s in sets), [])], env=env, capture_output=True,
                             text=True, timeout=120)
        if sub.returncode != 0:
            print(sub.stderr, file=sys.stderr)
            return 1
        follower = subprocess.Popen([sys.executable, "-m", "launcher", "logs", job, "-n", ns, "-f"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        raw = runs / job / "logs" / f"{pod}.log"
        ks.wait_for(lambda: raw.exists() and raw.read_bytes().count(b"\n") >= len(header), 90,
                    interval=0.1, what="the follower to attach")
        jsonl = runs / job / "metrics.jsonl"
        offset = 0
        seen: set[int] = set()
        for step, m in metrics:
            line = f"(TaskRunnerV1 pid=4242) {simlog.concat_dict_to_str(m, step)}"
            t0 = time.monotonic()
            ks.append_log(served, [line])
            while step not in seen:
                if jsonl.exists():
                    with open(jsonl, "rb") as f:
                        f.seek(offset)
                        data = f.read()
                    cut = data.rfind(b"\n") + 1
                    offset += cut
                    for row in data[:cut].splitlines():
                        seen.add(json.loads(row)["step"])
                if step in seen:
                    break
                if time.monotonic() - t0 > 30:
                    raise TimeoutError(f"step {step} never reached metrics.jsonl")
                time.sleep(0.002)
            latencies.append(time.monotonic() - t0)
            time.sleep(a.interval)
    finally:
        if follower is not None:
            follower.terminate()
            follower.wait(10)
        info.kubectl("-n", ns, "delete", "pytorchjobs", "--all", "--wait=true", "--timeout=60s", check=False)
        info.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    lat = sorted(latencies)
    p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
    result = {"lines": len(lat), "interval_s": a.interval, "median_s": round(statistics.median(lat), 4),
              "p95_s": round(p95, 4), "max_s": round(lat[-1], 4), "min_s": round(lat[0], 4),
              "mean_s": round(statistics.fmean(lat), 4)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
