#!/usr/bin/env python3
"""A real verl rehearsal on the local cluster's real nodes while the host is busy, at two CPU weights of the nodes.

usage: bench/bench_node_cpu_weight.py [--busy 2] [--weights 1024,4096] [--namespace default]

`make test` runs its test lanes beside the real nodes' pods on the same two cores. hack/cluster/node.sh gives each
real node's cgroup root a CPU weight (cpu.shares, GRPO_NODE_CPU_SHARES); this measures what the weight does to a real
run: for each weight it sets both nodes' cpu.shares, starts `--busy` CPU-bound processes in one session of their own
(as a test lane is: one autogroup), runs `launcher doctor configs/grpo-exp3-cpu.yaml --rehearse` (two real verl steps
of the built-in tiny model in a real pod) and times it, then stops the busy processes. It prints each weight's time
and its ratio to the first weight's (the baseline, measured in the same run), and leaves the node.sh default set.

Needs root, the running local cluster with its real nodes (make cluster-up with GRPO_REAL_NODE=1) and .venv.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODES = ("grpo-node-0", "grpo-node-1")
DEFAULT_SHARES = 4096  # hack/cluster/node.sh's GRPO_NODE_CPU_SHARES default


def set_shares(value: int) -> None:
    for node in NODES:
        Path(f"/sys/fs/cgroup/cpu/{node}/cpu.shares").write_text(str(value))


def rehearse(namespace: str, kubeconfig: str) -> float:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    start = time.monotonic()
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "launcher", "doctor",
                        str(ROOT / "configs" / "grpo-exp3-cpu.yaml"), "--rehearse", "-n", namespace],
                       env=env, capture_output=True, text=True, timeout=3600)
    took = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"doctor --rehearse failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the run (one session)")
    ap.add_argument("--weights", default="1024,4096", help="cpu.shares to compare; the first is the baseline")
    ap.add_argument("--namespace", default="default")
    a = ap.parse_args()
    kubeconfig = str(Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher")) / "cluster"
                     / "kubeconfig")
    weights = [int(w) for w in a.weights.split(",")]
    times = {}
    try:
        for w in weights:
            set_shares(w)
            # `busy` spinning processes (the first forks the others), all in one new session, killed as a group
            spin = (f"import os\nfor _ in range({a.busy} - 1):\n    if os.fork() == 0:\n        break\n"
                    "while True:\n    pass\n")
            busy = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
            try:
                times[w] = rehearse(a.namespace, kubeconfig)
            finally:
                os.killpg(busy.pid, signal.SIGKILL)
                busy.wait()
            print(f"cpu.shares {w:5d}: doctor --rehearse (2 real verl steps) in {times[w]:6.1f} s beside "
                  f"{a.busy} busy processes", flush=True)
    finally:
        set_shares(DEFAULT_SHARES)
    base = times[weights[0]]
    for w in weights:
        print(f"cpu.shares {w:5d}: {times[w]:6.1f} s, {times[w] / base:.2f}x the baseline (cpu.shares {weights[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
