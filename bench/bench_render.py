#!/usr/bin/env python3
"""`launcher render` and `launcher validate` wall time against `helm template` of charts/grpo-exp3, same config,
same run.

Both renderers run as subprocesses, interleaved rep by rep so background load hits both alike; the
median of --reps repetitions is reported, with the ratio launcher/helm (< 1: the launcher is faster).
For information it also times, in this process, spec loading + render + YAML dump (what the CLI does
after start-up), and the Python start-up floor: `python -c pass` and `python -c "import launcher.render.manifests"`.

The launcher runs twice per rep: as installed, with its bytecode cached (pip compiles every module at
install time; here the .pyc files go to a temporary PYTHONPYCACHEPREFIX, written by a warm-up run),
and straight from the source tree when PYTHONDONTWRITEBYTECODE is set (as on the dev boxes, where
each start recompiles every launcher module it imports). The ratio is given for both.

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
    from launcher.spec.load import load_spec
    from launcher.render.manifests import render, to_yaml

    helm = tool("helm")
    py = sys.executable
    backend = ["--backend", args.backend] if args.backend else []
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/grpo-helm/cache", "HELM_CONFIG_HOME": "/tmp/grpo-helm/config",
           "HELM_DATA_HOME": "/tmp/grpo-helm/data"}
    with tempfile.TemporaryDirectory() as tmp:
        values = Path(tmp) / "values.yaml"
        values.write_text(gen_chart.values_text(gen_chart.values_for_config(args.config, [], args.backend), args.config))
        launcher_cmd = [py, "-m", "launcher", "render", args.config, *backend]
        validate_cmd = [py, "-m", "launcher", "validate", args.config, *backend]
        env["PYTHONPATH"] = str(ROOT / "src")
        source_env = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
        pyc_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        pyc_env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pyc")
        helm_cmd = [helm, "template", "grpo-exp3", str(CHART), "-f", str(values)]
        # name -> (command, environment), timed in this order within each rep
        runs = {
            "launcher render": (launcher_cmd, pyc_env),
            **({"launcher render, before": (launcher_cmd, {**pyc_env, "PYTHONPATH": args.before})} if args.before else {}),
            "launcher render, no bytecode": (launcher_cmd, source_env),
            **({"launcher render, no bytecode, before": (launcher_cmd, {**source_env, "PYTHONPATH": args.before})}
               if args.before else {}),
            "launcher validate": (validate_cmd, pyc_env),
            **({"launcher validate, before": (validate_cmd, {**pyc_env, "PYTHONPATH": args.before})} if args.before else {}),
            "helm template": (helm_cmd, env),
            "python -c pass": ([py, "-c", "pass"], pyc_env),
            "python -c 'import launcher.render.manifests, launcher.spec.load'":
                ([py, "-c", "import launcher.render.manifests, launcher.spec.load"], pyc_env),
        }
        for cmd, run_env in runs.values():
            _time(cmd, run_env)  # warm the page cache and write the bytecode of the cached runs
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.reps):
            for name, (cmd, run_env) in runs.items():
                times[name].append(_time(cmd, run_env))

    t_inproc = []
    for _ in range(args.reps):
        t = time.perf_counter()
        to_yaml(render(load_spec(args.config, backend=args.backend)))
        t_inproc.append(time.perf_counter() - t)

    med = statistics.median
    times["in-process load_spec + render + to_yaml"] = t_inproc
    print(f"config {args.config} backend {args.backend or 'from config'}, {args.reps} reps, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}" + (f"; before: {args.before}" if args.before else ""))
    print(f"{'what':62s} {'median ms':>10s} {'min ms':>8s}")
    for name, values in times.items():
        print(f"{name:62s} {med(values) * 1000:10.1f} {min(values) * 1000:8.1f}")
    helm_median = med(times["helm template"])
    for name in runs:
        if name.startswith(("launcher render", "launcher validate")):
            ratio = med(times[name]) / helm_median
            print(f"ratio {name}/helm (median wall): {ratio:.2f}x  ({'faster' if ratio < 1 else 'slower'} than helm)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
