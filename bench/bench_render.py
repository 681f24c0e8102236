#!/usr/bin/env python3
"""`launcher render` wall time against `helm template` of charts/grpo-exp3, same config, same run.

Both renderers run as subprocesses, interleaved rep by rep so background load hits both alike; the
median of --reps repetitions is reported, with the ratio launcher/helm (< 1: the launcher is faster).
For information it also times, in this process, spec loading + render + YAML dump (what the CLI does
after start-up), and the Python start-up floor: `python -c pass` and `python -c "import launcher.render"`.

    .venv/bin/python bench/bench_render.py [--config configs/grpo-exp3.yaml] [--backend B] [--reps 21] \\
        [--before OLD/src]

helm is the one from `make tools` (tests/helm_tools.py finds it); nothing on PATH is used.
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
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "hack"))

from helm_tools import CHART, tool  # noqa: E402


def _time(cmd: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "grpo-exp3.yaml"))
    parser.add_argument("--backend", choices=("pytorchjob", "rayjob"))
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--before", metavar="SRC",
                        help="also time `launcher render` from this source tree (e.g. main's src/), same run")
    args = parser.parse_args(argv)

    import gen_chart
    from launcher.config import load_spec
    from launcher.render import render, to_yaml

    helm = tool("helm")
    py = sys.executable
    backend = ["--backend", args.backend] if args.backend else []
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/grpo-helm/cache", "HELM_CONFIG_HOME": "/tmp/grpo-helm/config",
           "HELM_DATA_HOME": "/tmp/grpo-helm/data"}
    with tempfile.TemporaryDirectory() as tmp:
        values = Path(tmp) / "values.yaml"
        values.write_text(gen_chart.values_text(gen_chart.values_for_config(args.config, [], args.backend), args.config))
        launcher_cmd = [py, "-m", "launcher", "render", args.config, *backend]
        env["PYTHONPATH"] = str(ROOT / "src")
        before_env = {**env, "PYTHONPATH": args.before} if args.before else None
        helm_cmd = [helm, "template", "grpo-exp3", str(CHART), "-f", str(values)]
        # same objects? (cheap sanity check: the parity tests prove it properly)
        for cmd in (launcher_cmd, helm_cmd):
            _time(cmd, env)  # warm the page cache for both binaries
        t_launcher, t_before, t_helm, t_pass, t_import = [], [], [], [], []
        for _ in range(args.reps):
            t_launcher.append(_time(launcher_cmd, env))
            if before_env:
                t_before.append(_time(launcher_cmd, before_env))
            t_helm.append(_time(helm_cmd, env))
            t_pass.append(_time([py, "-c", "pass"]))
            t_import.append(_time([py, "-c", "import launcher.render, launcher.config"]))

    t_inproc = []
    for _ in range(args.reps):
        t = time.perf_counter()
        to_yaml(render(load_spec(args.config, backend=args.backend)))
        t_inproc.append(time.perf_counter() - t)

    med = statistics.median
    rows = [
        ("launcher render (subprocess)", med(t_launcher), min(t_launcher)),
        *([(f"launcher render from {args.before} (subprocess)", med(t_before), min(t_before))] if t_before else []),
        ("helm template (subprocess)", med(t_helm), min(t_helm)),
        ("python -c pass", med(t_pass), min(t_pass)),
        ("python -c 'import launcher.render, launcher.config'", med(t_import), min(t_import)),
        ("in-process load_spec + render + to_yaml", med(t_inproc), min(t_inproc)),
    ]
    print(f"config {args.config} backend {args.backend or 'from config'}, {args.reps} reps, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'what':62s} {'median ms':>10s} {'min ms':>8s}")
    for name, m, lo in rows:
        print(f"{name:62s} {m * 1000:10.1f} {lo * 1000:8.1f}")
    ratio = med(t_launcher) / med(t_helm)
    print(f"ratio launcher/helm (median wall): {ratio:.2f}x  ({'faster' if ratio < 1 else 'slower'} than helm)")
    if t_before:
        print(f"ratio before/helm (median wall): {med(t_before) / med(t_helm):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
