#!/usr/bin/env python3
"""Start-up of the verbs that should feel instant: `--help`, `validate`, `list` (0 jobs), fresh processes.

Each command runs as `python -m launcher ...` from this tree's src/, and with --before from another
source tree (e.g. an export of main's src/), interleaved rep by rep; medians are printed with the ratio
before/after. `list` talks to $KUBECONFIG's cluster (default: the local one) in the `default` namespace,
so what it measures is start-up plus one LIST per backend.

Each command is timed as installed (bytecode cached: pip compiles at install time; here the .pyc files
go to a temporary PYTHONPYCACHEPREFIX, written by a warm-up run) and from the source tree with
PYTHONDONTWRITEBYTECODE=1 (as on the dev boxes: every start recompiles each launcher module it imports).

    .venv/bin/python bench/bench_startup.py [--reps 5] [--before OLD/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "--help": ["--help"],
    "validate configs/grpo-exp3.yaml": ["validate", str(ROOT / "configs" / "grpo-exp3.yaml")],
    "list -n default": ["list", "-n", "default"],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--before", metavar="SRC", help="also time the commands from this source tree, same run")
    a = ap.parse_args(argv)
    os.environ.setdefault("KUBECONFIG", str(Path.home() / ".cache" / "grpo-launcher" / "cluster" / "kubeconfig"))
    trees = {"after": str(ROOT / "src"), **({"before": a.before} if a.before else {})}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        modes = {"bytecode cached": {**base, "PYTHONPYCACHEPREFIX": tmp},
                 "no bytecode": {**base, "PYTHONDONTWRITEBYTECODE": "1"}}
        for rep in range(a.reps + 1):  # rep 0 warms the page cache and writes the bytecode
            for name, args in COMMANDS.items():
                for mode, env in modes.items():
                    for tag, src in trees.items():
                        t = time.perf_counter()
                        subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                                       env={**env, "PYTHONPATH": src})
                        if rep:
                            times.setdefault((name, mode, tag), []).append(time.perf_counter() - t)
    print(f"{a.reps} reps, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for name in COMMANDS:
        for mode in modes:
            after = statistics.median(times[(name, mode, "after")])
            line = f"{name:34s} {mode:16s} after {after * 1000:7.1f} ms"
            if a.before:
                before = statistics.median(times[(name, mode, "before")])
                line += f"   before {before * 1000:7.1f} ms   before/after {before / after:.1f}x"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
