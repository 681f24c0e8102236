"""Real nodes: how long they take to start, and what a real-pod smoke job costs over a simulated (KWOK) one.

    python bench/bench_realnode.py [--restart] [--runs N]

--restart: stop and recreate the whole local cluster first (hack/cluster/down.sh, then up.sh with
GRPO_REAL_NODE=1) and report the real nodes' start time next to the control plane's, both from up.sh's own
timing lines in the same run. The image must already be built (`make image-cpu`); a cold import is part of the
node start when containerd's root lacks it.

Then, N times each: `launcher submit --follow` of configs/smoke-cpu.yaml (PyTorchJob, 1 node, real pods on
grpo-node-0) and of grpo-exp3 on the KWOK A100 nodes with a 1 s simulated run (the same launcher, API server
and operator; no container): submit to Succeeded, median, and the ratio real / simulated.
Not a test: it needs the local cluster (it starts one) and disturbs whatever else uses it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HACK = ROOT / "hack" / "cluster"
CACHE = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher"))
KUBECONFIG = Path(os.environ.get("GRPO_CLUSTER_DIR", CACHE / "cluster")) / "kubeconfig"
KUBECTL = CACHE / "bin" / "tools" / "kubectl"


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    e.update(GRPO_REAL_NODE="1", PYTHONPATH=str(ROOT / "src"))
    return e


def restart() -> dict:
    subprocess.run([str(HACK / "down.sh")], env=env(), check=True, capture_output=True)
    t0 = time.monotonic()
    p = subprocess.run([str(HACK / "up.sh")], env=env(), check=True, capture_output=True, text=True)
    total = time.monotonic() - t0
    cp = re.search(r"control plane ready \((\d+)s\)", p.stderr)
    ops = re.search(r"nodes and operators ready \((\d+)s\)", p.stderr)
    nodes = re.search(r"real nodes ready \((\d+)s\)", p.stderr)
    if not (cp and ops and nodes):
        sys.exit(f"unexpected up.sh output:\n{p.stderr[-2000:]}")
    return {"control_plane_s": int(cp.group(1)), "operators_s": int(ops.group(1)) - int(cp.group(1)),
            "real_nodes_s": int(nodes.group(1)), "up_total_s": round(total, 1)}


def submit(config: str, sets: list[str], ns: str) -> float:
    runs = tempfile.mkdtemp(prefix="bench-realnode-")
    e = env() | {"KUBECONFIG": str(KUBECONFIG), "LAUNCHER_RUNS_DIR": runs}
    args = [sys.executable, "-m", "launcher", "submit", config, "-n", ns, "--follow", "--new"]
    for s in sets:
        args += ["--set", s]
    t0 = time.monotonic()
    p = subprocess.run(args, env=e, capture_output=True, text=True, timeout=900)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{config} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restart", action="store_true")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    out: dict = {}
    if a.restart:
        out["start"] = restart()
        s = out["start"]
        print(f"control plane {s['control_plane_s']} s, operators +{s['operators_s']} s, real nodes "
              f"{s['real_nodes_s']} s (ratio real nodes / control plane {s['real_nodes_s'] / s['control_plane_s']:.2f}); "
              f"up.sh {s['up_total_s']} s")
    else:
        subprocess.run([str(HACK / "up.sh")], env=env(), check=True, capture_output=True)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    kc = [str(KUBECTL), "--kubeconfig", str(KUBECONFIG)]
    subprocess.run([*kc, "create", "namespace", ns], check=True, capture_output=True)
    try:
        real, sim = [], []
        for i in range(a.runs):
            real.append(submit(str(ROOT / "configs" / "smoke-cpu.yaml"), [f"smoke.step_seconds={1 + i / 1000}"], ns))
            ann = json.dumps({"pod-complete.stage.kwok.x-k8s.io/delay": "1s"})
            sim.append(submit(str(ROOT / "configs" / "grpo-exp3.yaml"),
                              [f"scheduling.pod_annotations={ann}", f"trainer.total_training_steps={3 + i}"], ns))
        r, k = statistics.median(real), statistics.median(sim)
        out["smoke_submit_to_succeeded_s"] = [round(x, 1) for x in real]
        out["kwok_submit_to_succeeded_s"] = [round(x, 1) for x in sim]
        print(f"smoke-cpu (real pods, PyTorchJob x1): median {r:.1f} s {out['smoke_submit_to_succeeded_s']}")
        print(f"grpo-exp3 on KWOK (1 s simulated run): median {k:.1f} s {out['kwok_submit_to_succeeded_s']}")
        print(f"ratio real / simulated: {r / k:.1f}x")
    finally:
        subprocess.run([*kc, "delete", "namespace", ns, "--wait=false"], capture_output=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
