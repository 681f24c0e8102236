#!/usr/bin/env python3
"""`launcher list` against `kubectl get pytorchjobs` with N launcher jobs in one namespace, same run.

Creates a fresh namespace `bench-list-<random>` on the cluster of $KUBECONFIG (default: the local
cluster's, ~/.cache/grpo-launcher/cluster/kubeconfig), fills it with N PyTorchJobs through the API
(the launcher's own rendering of --config, renamed `<name>-bNNNN`, with the launcher's labels and
`runPolicy.suspend: true`, so the training operator creates no pods: this measures listing, not
scheduling), then times, interleaved rep by rep, both as fresh processes:

    python -m launcher list -n NS        (one LIST per backend with the launcher's label selector)
    kubectl get pytorchjobs -n NS

and prints the medians, the ratio launcher/kubectl, and for information the launcher's start-up floor
(`python -m launcher --help`) and one in-process `launcher list` after start-up. The namespace is
deleted at the end, also on failure or Ctrl-C.

    .venv/bin/python bench/bench_list.py [--jobs 1000] [--reps 7] [--keep] [--before OLD/src]
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import secrets
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_KUBECONFIG = Path.home() / ".cache" / "grpo-launcher" / "cluster" / "kubeconfig"
KUBECTL = Path.home() / ".cache" / "grpo-launcher" / "bin" / "tools" / "kubectl"


def _time(cmd: list[str], env: dict) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return time.perf_counter() - t, out.stdout


def _jobs(config: str, namespace: str, n: int) -> list[dict]:
    from launcher.spec.load import load_spec
    from launcher.render.manifests import render

    job = next(o for o in render(load_spec(config, backend="pytorchjob")) if o["kind"] == "PyTorchJob")
    out = []
    for i in range(n):
        j = copy.deepcopy(job)
        j["metadata"]["name"] = f"{job['metadata']['name'][:38]}-b{i:04d}"
        j["metadata"]["namespace"] = namespace
        j["spec"].setdefault("runPolicy", {})["suspend"] = True
        out.append(j)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--config", default=str(ROOT / "configs" / "grpo-exp3.yaml"))
    ap.add_argument("--keep", action="store_true", help="keep the namespace (prints its name)")
    ap.add_argument("--before", metavar="SRC",
                    help="also time `launcher list` from this source tree (e.g. a checkout of main's src/), same run")
    a = ap.parse_args(argv)

    os.environ.setdefault("KUBECONFIG", str(DEFAULT_KUBECONFIG))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    from launcher.kube import Kube
    from launcher.kube.client import NAMESPACE

    kube = Kube.connect()
    ns = f"bench-list-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        t = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:  # the shared box has 2 cores: a few requests in flight suffice
            list(pool.map(kube.create, _jobs(a.config, ns, a.jobs)))
        create_s = time.perf_counter() - t
        py = sys.executable
        launcher_cmd = [py, "-m", "launcher", "list", "-n", ns]
        before_env = {**env, "PYTHONPATH": a.before} if a.before else None
        kubectl_cmd = [str(KUBECTL), "get", "pytorchjobs", "-n", ns]
        rows = {}
        for cmd in (launcher_cmd, kubectl_cmd):  # warm-up, and check both see every job
            _, out = _time(cmd, env)
            rows[cmd[0]] = len(out.strip().splitlines()) - 1
        t_launcher, t_kubectl, t_help, t_before = [], [], [], []
        for _ in range(a.reps):
            if before_env:
                t_before.append(_time(launcher_cmd, before_env)[0])
            t_launcher.append(_time(launcher_cmd, env)[0])
            t_kubectl.append(_time(kubectl_cmd, env)[0])
            t_help.append(_time([py, "-m", "launcher", "--help"], env)[0])
        from launcher.cli.main import main as launcher_main

        t_inproc = []
        for _ in range(a.reps):
            t = time.perf_counter()
            with redirect_stdout(io.StringIO()):
                launcher_main(["list", "-n", ns])
            t_inproc.append(time.perf_counter() - t)
    finally:
        if a.keep:
            print(f"kept namespace {ns}")
        else:
            kube.delete(NAMESPACE, ns)

    med = statistics.median
    print(f"{a.jobs} PyTorchJobs in {ns} (created in {create_s:.1f} s), {a.reps} reps, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; rows: launcher {rows[py]}, kubectl {rows[str(KUBECTL)]}")
    print(f"{'what':45s} {'median ms':>10s} {'min ms':>8s}")
    for name, ts in (("python -m launcher list -n NS", t_launcher), ("kubectl get pytorchjobs -n NS", t_kubectl),
                     ("python -m launcher --help (start-up floor)", t_help),
                     ("launcher list, in process (after start-up)", t_inproc),
                     (f"launcher list from {a.before}", t_before)):
        if not ts:
            continue
        print(f"{name:45s} {med(ts) * 1000:10.1f} {min(ts) * 1000:8.1f}")
    ratio = med(t_launcher) / med(t_kubectl)
    print(f"ratio launcher/kubectl (median wall): {ratio:.2f}x  ({'faster' if ratio < 1 else 'slower'} than kubectl)")
    if t_before:
        print(f"ratio before/kubectl (median wall): {med(t_before) / med(t_kubectl):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
