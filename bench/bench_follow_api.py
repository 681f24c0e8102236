#!/usr/bin/env python3
"""API requests per followed run per minute, polling follower vs watch follower, from the API server's metrics.

On the local control plane (`make cluster-up`): creates a namespace with N simulated runs (grpo-exp3 as
`workload: smoke` CPU pods pinned to the KWOK nodes, so 50 fit; KWOK keeps each pod Running for 30 min and
serves every pod one live verl log through a `ClusterLogs`, a line appended every 2 s). For each size
(1, 10, 50) and mode (`LAUNCHER_FOLLOW_STATE=poll`, the launcher's former way; `watch`, the default), a
child process follows that many runs with the real `LogFollower`s (one process, as a sweep will), and over a
steady-state window (after a warm-up) the parent reads kube-apiserver's own `/metrics`
(`apiserver_request_total`, through the kubeconfig's admin credentials) before and after: requests on
`pods` and `pytorchjobs` by verb, log streams (`pods/log`) counted apart. The API server is shared (its
controllers, KWOK, other users), so a window with no follower is measured first and its counts subtracted;
the child also counts its own requests (client side), which must agree. Also: the child's CPU time in the
window and its peak RSS.

    .venv/bin/python bench/bench_follow_api.py [--sizes 1,10,50] [--window 30] [--warmup 10]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests" / "e2e")]

CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
RESOURCES = ("pods", "pytorchjobs")


# -- the child: follow N runs in one process ------------------------------------------------------


def child(a) -> int:
    from launcher.follow import LogFollower
    from launcher.kube import Kube
    from launcher.kube import jobs as J
    from launcher.runs import RunDir

    kube = Kube.connect(a.kubeconfig, namespace=a.namespace)
    counts: Counter = Counter()
    real = kube.request

    def counted(method, path, **kw):  # the client-side tally (the server's metrics are the measure)
        q = kw.get("query") or {}
        parts = path.rstrip("/").split("/")
        if parts[-1] == "log":
            key = "log pods/log"
        elif parts[-1] in RESOURCES:
            key = f"{'WATCH' if q.get('watch') else 'LIST' if method == 'GET' else method} {parts[-1]}"
        else:
            key = f"{method} {parts[-2]}"
        counts[key] += 1
        return real(method, path, **kw)

    kube.request = counted
    runs = Path(a.runs)
    jobs = a.jobs.split(",")
    followers = []
    for job in jobs:
        ref = J.find_run(kube, job)
        followers.append(LogFollower(kube, ref, RunDir(runs / job), poll_interval=1.0))
    total = a.warmup + a.window
    threads = [threading.Thread(target=f.run, kwargs={"timeout": total + 1}, daemon=True) for f in followers]
    for t in threads:
        t.start()
    time.sleep(a.warmup)
    c0, r0 = Counter(counts), resource.getrusage(resource.RUSAGE_SELF)
    print("MARK0", flush=True)
    time.sleep(a.window)
    c1, r1 = Counter(counts), resource.getrusage(resource.RUSAGE_SELF)
    print("MARK1 " + json.dumps({
        "client": dict(c1 - c0),
        "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
        "peak_rss_mib": r1.ru_maxrss / 1024,
        "lines": sum(f.lines for f in followers),
        "streams": sum(len(f.followers) for f in followers)}), flush=True)
    for t in threads:
        t.join(30)
    return 0


# -- the parent -----------------------------------------------------------------------------------


def scrape(kube) -> Counter:
    """`apiserver_request_total` summed by (verb, resource[/subresource]) for the resources of interest."""
    import urllib3
    from prometheus_client.parser import text_string_to_metric_families

    from launcher.kube.client import _auth_headers

    cfg = kube.api.configuration
    resp = kube.api.rest_client.pool_manager.request(
        "GET", cfg.host + "/metrics", headers=_auth_headers(cfg), timeout=urllib3.Timeout(30))
    if resp.status != 200:
        raise SystemExit(f"GET /metrics answered {resp.status}: the kubeconfig's user cannot read the metrics")
    out: Counter = Counter()
    for fam in text_string_to_metric_families(resp.data.decode()):
        if fam.name != "apiserver_request":
            continue
        for s in fam.samples:
            lb = s.labels
            if not s.name.endswith("_total") or lb.get("resource") not in RESOURCES:
                continue
            res = lb["resource"] + (f"/{lb['subresource']}" if lb.get("subresource") else "")
            out[(lb.get("verb", "?"), res)] += s.value
    return out


def split(delta: Counter) -> tuple[float, float, dict]:
    """(requests other than log streams, log-stream requests, detail) of one window's delta."""
    logs = sum(v for (verb, res), v in delta.items() if res == "pods/log")
    # state requests the follower could send: reads (GET/LIST/WATCH) of pods and pytorchjobs
    state = sum(v for (verb, res), v in delta.items() if res in RESOURCES and verb in ("GET", "LIST", "WATCH"))
    return state, logs, {f"{v} {r}": n for (v, r), n in sorted(delta.items()) if n}


def window(kube, a, mode: str, jobs: list[str], tmp: Path) -> dict:
    env = {**os.environ, "LAUNCHER_FOLLOW_STATE": mode or "watch", "PYTHONPATH": str(REPO / "src")}
    if not jobs:  # the background: nobody follows
        time.sleep(a.warmup)
        m0 = scrape(kube)
        time.sleep(a.window)
        m1 = scrape(kube)
        return {"mode": "none", "runs": 0, "server": m1 - m0}
    runs = tmp / f"runs-{mode}-{len(jobs)}"
    p = subprocess.Popen([sys.executable, __file__, "--child", "--kubeconfig", a.kubeconfig, "--namespace",
                          a.namespace, "--runs", str(runs), "--jobs", ",".join(jobs), "--warmup", str(a.warmup),
                          "--window", str(a.window)], env=env, stdout=subprocess.PIPE, text=True)
    m0 = m1 = None
    info = {}
    for line in p.stdout:
        if line.startswith("MARK0"):
            m0 = scrape(kube)
        elif line.startswith("MARK1"):
            m1 = scrape(kube)
            info = json.loads(line.split(" ", 1)[1])
    p.wait(120)
    if m0 is None or m1 is None:
        raise SystemExit(f"the {mode} follower of {len(jobs)} runs ended early (exit {p.returncode})")
    return {"mode": mode, "runs": len(jobs), "server": m1 - m0, **info}


def setup(kube, a, n: int):
    """N simulated runs in the namespace, all Running on KWOK nodes, each served a live verl log."""
    import kwok_support as ks
    from launcher import simlog
    from launcher.commands.submit import create_all
    from launcher.config import load_spec
    from launcher.kube import POD
    from launcher.render import render
    from launcher_helpers import serve_namespace

    ann = json.dumps({ks.POD_COMPLETE_DELAY: "1800s"})
    jobs = []
    for i in range(n):
        spec = load_spec(CONFIG, [
            "workload=smoke", "resources.gpus_per_node=0", 'resources.cpu="1"', "resources.memory=1Gi",
            "resources.shm_size=64Mi", 'scheduling.node_selector={"type":"kwok"}', f"scheduling.namespace={a.namespace}",
            f"trainer.total_training_steps={1000 + i}", f"scheduling.pod_annotations={ann}"])
        create_all(kube, render(spec))
        jobs.append(spec.job_name)
    lines = [ln.rstrip("\n") for ln in simlog.generate(steps=3, seed=1)]
    path = serve_namespace(a.info, a.namespace, lines)
    steps = [ln.rstrip("\n") for ln in simlog.generate(steps=400, seed=2) if ln.startswith("step:")]
    live = ks.LiveLog(path).start(steps, interval=2.0)
    ks.wait_for(lambda: sum(1 for p in kube.list(POD) if (p.get("status") or {}).get("phase") == "Running") >= n,
                timeout=300, interval=2, what=f"{n} pods Running")
    return jobs, live


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,10,50", help="numbers of concurrently followed runs (default 1,10,50)")
    ap.add_argument("--window", type=float, default=30, help="steady-state seconds measured per case (default 30)")
    ap.add_argument("--warmup", type=float, default=10, help="seconds before each window (default 10)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    ap.add_argument("--namespace", help=argparse.SUPPRESS)
    ap.add_argument("--runs", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    import kwok_support as ks
    from launcher.kube import Kube

    info = ks.identify_cluster()
    if info is None:
        print("no local cluster: run `make cluster-up` first", file=sys.stderr)
        return 2
    a.info, a.kubeconfig = info, str(info.kubeconfig)
    a.namespace = f"bench-follow-{uuid.uuid4().hex[:6]}"
    sizes = [int(x) for x in a.sizes.split(",")]
    info.kubectl("create", "namespace", a.namespace)
    info.kubectl("label", "namespace", a.namespace, f"{ks.E2E_NAMESPACE_LABEL}={a.namespace}")
    kube = Kube.connect(a.kubeconfig, namespace=a.namespace)
    ks.wait_for(lambda: info.kubectl("get", "serviceaccount", "default", "-n", a.namespace, check=False)
                .returncode == 0, timeout=60, what="serviceaccount default")
    live = None
    results = []
    try:
        t0 = time.monotonic()
        jobs, live = setup(kube, a, max(sizes))
        print(f"# {max(sizes)} simulated runs Running in {a.namespace} after {time.monotonic() - t0:.0f} s",
              file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp:
            results.append(window(kube, a, "", [], Path(tmp)))
            for n in sizes:
                for mode in ("poll", "watch"):
                    r = window(kube, a, mode, jobs[:n], Path(tmp))
                    results.append(r)
                    print(f"# {mode} {n}: {split(r['server'])[:2]}", file=sys.stderr)
    finally:
        if live is not None:
            live.stop()
        info.kubectl("delete", "clusterlogs", f"{a.namespace}-all", "--ignore-not-found", "--wait=false",
                     check=False)
        info.kubectl("delete", "pytorchjobs", "--all", "-n", a.namespace, "--wait=false", check=False)
        info.kubectl("delete", "namespace", a.namespace, "--wait=false", check=False)
    base_state, base_logs, base_detail = split(results[0]["server"])
    per_min = 60.0 / a.window
    print(f"window {a.window:g} s after {a.warmup:g} s warm-up; background (no follower) in the window: "
          f"{base_state:.0f} pod/pytorchjob reads, {base_logs:.0f} log requests ({base_detail})")
    print("| runs | mode | server: reads/run/min (minus background) | server: log streams opened/run/min | "
          "client: non-log requests/run/min | follower CPU (% of a core) | peak RSS (MiB) | lines read |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results[1:]:
        state, logs, _ = split(r["server"])
        n = r["runs"]
        client = sum(v for k, v in r["client"].items() if not k.startswith("log"))
        print(f"| {n} | {r['mode']} | {max(state - base_state, 0) * per_min / n:.2f} | {logs * per_min / n:.2f} | "
              f"{client * per_min / n:.2f} | {100 * r['cpu_s'] / a.window:.1f} | {r['peak_rss_mib']:.0f} | "
              f"{r['lines']} |")
    print("\nclient-side detail per case (requests in the window):")
    for r in results[1:]:
        print(f"  {r['mode']:5} {r['runs']:3}: {dict(sorted(r['client'].items()))}")
    print("server-side detail per case (requests in the window, background included):")
    for r in results[1:]:
        print(f"  {r['mode']:5} {r['runs']:3}: {split(r['server'])[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
