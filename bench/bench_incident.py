"""Stall detection latency: from a real hang to the incident on disk, against the watchdog's stall bound.

    python bench/bench_incident.py [--config configs/grpo-exp3-cpu.yaml] [--stall-min 30] [--stall-factor 5]

One real run (verl 0.9.1 on CPU, the built-in tiny model) through `launcher submit --follow --on-stall report` on
the local cluster's real node 0. After its third step, vLLM's engine-core process is stopped with SIGSTOP (through
`kubectl exec`, as tests/e2e/test_real_incidents_e2e.py does); the benchmark then polls the run directory until
`incidents/*/incident.json` exists. Figures:

- latency: SIGSTOP → incident.json written (this machine's monotonic clock);
- the stall bound the watchdog applied (from the incident's finding), which is the baseline: a watchdog cannot
  report sooner than one bound after the last step, and the last step arrived before the stop;
- ratio latency / bound (aim: at most 2) and the capture's own time (`capture_s`: the exec, py-spy over every
  Python process, the pods' logs and state).

Needs `GRPO_REAL_NODE=1 make cluster-up` (the CPU image imported on the node). Not a test: one real run, ~4 min.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher"))
KUBECONFIG = Path(os.environ.get("GRPO_CLUSTER_DIR", CACHE / "cluster")) / "kubeconfig"
KUBECTL = [str(CACHE / "bin" / "tools" / "kubectl"), "--kubeconfig", str(KUBECONFIG)]
sys.path.insert(0, str(ROOT / "hack"))
from faults import STOP_ENGINE  # noqa: E402 (hack/faults.py, shared with the e2e tests)


def wait_for(what: str, predicate, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "grpo-exp3-cpu.yaml"))
    ap.add_argument("--stall-min", default="30")
    ap.add_argument("--stall-factor", default="5")
    args = ap.parse_args()

    ns = f"bench-incident-{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="bench-incident-"))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(KUBECONFIG), LAUNCHER_RUNS_DIR=str(work / "runs"), PYTHONPATH=str(ROOT / "src"))
    subprocess.run([*KUBECTL, "create", "namespace", ns], check=True, capture_output=True)
    follow = None
    try:
        with (work / "follow.err").open("w") as err:
            follow = subprocess.Popen(
                [sys.executable, "-m", "launcher", "submit", args.config, "-n", ns, "--follow", "--new",
                 "--on-stall", "report", "--stall-min", args.stall_min, "--stall-factor", args.stall_factor,
                 "--set", "trainer.total_training_steps=25"],
                env=env, stdout=subprocess.DEVNULL, stderr=err)
            runs = work / "runs"

            def three_steps():
                for m in runs.glob("*/metrics.jsonl"):
                    if len(m.read_text().splitlines()) >= 3:
                        return m.parent
                return None
            run = wait_for("3 real steps", three_steps, 900)
            pod = subprocess.run([*KUBECTL, "get", "pods", "-n", ns, "-o", "name"], check=True, capture_output=True,
                                 text=True).stdout.split()[0]
            subprocess.run([*KUBECTL, "exec", "-n", ns, pod, "-c", "pytorch", "--", "python3", "-c", STOP_ENGINE],
                           check=True, capture_output=True)
            stopped = time.monotonic()
            path = wait_for("the incident", lambda: next(iter(run.glob("incidents/*/incident.json")), None), 900)
            latency = time.monotonic() - stopped
        incident = json.loads(path.read_text())
        bound = incident["finding"]["evidence"]["bound_s"]
        out = {"latency_s": round(latency, 1), "stall_bound_s": bound, "ratio": round(latency / bound, 2),
               "capture_s": incident["capture_s"], "class": incident["verdict"]["class"],
               "median_step_s": incident["finding"]["evidence"]["median_step_s"], "outputs": str(work)}
        print(f"SIGSTOP of vLLM's engine → incident written: {out['latency_s']} s; stall bound {bound} s "
              f"(max(--stall-min {args.stall_min}, {args.stall_factor} × median step {out['median_step_s']} s)); "
              f"ratio {out['ratio']}x (aim ≤ 2x); capture itself {out['capture_s']} s; verdict {out['class']}")
        print(json.dumps(out))
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
        subprocess.run([*KUBECTL, "delete", "namespace", ns, "--wait=false"], capture_output=True)


if __name__ == "__main__":
    main()
