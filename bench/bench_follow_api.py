#!/usr/bin/env python3
"""API requests per followed run per minute, polling follower vs watch follower, from the API server's metrics.

On the local control plane (`make cluster-up`): creates a namespace with N simulated runs (grpo-exp3 as
`workload: smoke` CPU pods pinned to the KWOK nodes, so 50 fit; KWOK keeps each pod Running for 30 min and
serves every pod one live verl log through a `ClusterLogs`, a line appended every 2 s). For each size
(1, 10, 50) and mode (`LAUNCHER_FOLLOW_STATE=poll`, the launcher's former way; `watch`, the default), a
child process follows that many runs with the real `LogFollower`s (one process, as a sweep will) as a
ServiceAccount bound to exactly the Role `launcher rbac` renders. Over a steady-state window (after a
warm-up) the parent reads kube-apiserver's own `/metrics` (admin credentials of the kubeconfig) before and
after: `apiserver_flowcontrol_dispatched_requests_total` of a FlowSchema that matches only that
ServiceAccount, i.e. every request of the follower that API Priority and Fairness handles, which is all of
them except the long-running log streams (APF does not track long-running requests other than watches),
so "beyond the log streams" is measured by the server itself, unaffected by anyone else using the shared
API server (`apiserver_request_total` has no per-client label; its pod/pytorchjob counts are printed for
context). The child also counts its own requests, which must agree. Also: the child's CPU time in the
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
sys.path[:0] = [str(REPO / "src"), str(REPO / "hack"), str(REPO / "tests" / "e2e")]

CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
RESOURCES = ("pods", "pytorchjobs")


# -- the child: follow N runs in one process ------------------------------------------------------


def child(a) -> int:
    from launcher.run.follow import LogFollower
    from launcher.kube import Kube
    from launcher.kube import jobs as J
    from launcher.run.dirs import RunDir

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
        "peak_rss_mib": peak_rss_mib(),
        "lines": sum(f.lines for f in followers),
        "streams": sum(len(f.followers) for f in followers)}), flush=True)
    for t in threads:
        t.join(30)
    return 0


def peak_rss_mib() -> float:
    """This process's peak RSS (`VmHWM`; `ru_maxrss` would report the parent's, kept across fork+exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the parent -----------------------------------------------------------------------------------


FLOW_SCHEMA = "bench-follow-{ns}"


def scrape(kube, flow_schema: str) -> Counter:
    """From kube-apiserver's /metrics: `apiserver_request_total` by (verb, resource[/subresource]) for pods and
    pytorchjobs (everyone's traffic), and ("dispatched", flow schema): the requests API Priority and Fairness
    dispatched for the follower's own identity (its FlowSchema matches only the follower's ServiceAccount).
    APF does not track long-running requests other than watches, so a following log stream is not in it."""
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
        if fam.name == "apiserver_flowcontrol_dispatched_requests":
            for s in fam.samples:
                if s.labels.get("flow_schema") == flow_schema and s.name.endswith("_total"):
                    out[("dispatched", flow_schema)] += s.value
        if fam.name != "apiserver_request":
            continue
        for s in fam.samples:
            lb = s.labels
            if not s.name.endswith("_total") or lb.get("resource") not in RESOURCES:
                continue
            res = lb["resource"] + (f"/{lb['subresource']}" if lb.get("subresource") else "")
            out[(lb.get("verb", "?"), res)] += s.value
    return out


def isolate(info, ns: str, tmp: Path) -> str:
    """A ServiceAccount bound to the Role `launcher rbac` renders (so the follower runs with exactly the
    permissions the launcher documents), a kubeconfig with its token, and a FlowSchema that matches only it."""
    import yaml
    from rbac_support import launcher_user

    user, _, _ = launcher_user(info, ns, "bench-follower", tmp / "follower-kubeconfig")
    fs = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
          "metadata": {"name": FLOW_SCHEMA.format(ns=ns)},
          "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 500,
                   "distinguisherMethod": {"type": "ByUser"},
                   "rules": [{"subjects": [{"kind": "ServiceAccount",
                                            "serviceAccount": {"name": "bench-follower", "namespace": ns}}],
                              "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                 "namespaces": ["*"], "clusterScope": True}],
                              "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}
    info.kubectl("apply", "-f", "-", input=yaml.safe_dump(fs))
    return str(user.kubeconfig)


def split(delta: Counter) -> tuple[float, dict]:
    """(the follower's own dispatched requests, everyone's pod/pytorchjob requests by verb) of one window."""
    mine = sum(v for (verb, _), v in delta.items() if verb == "dispatched")
    return mine, {f"{v} {r}": n for (v, r), n in sorted(delta.items()) if n and v != "dispatched"}


def window(kube, a, mode: str, jobs: list[str], tmp: Path) -> dict:
    env = {**os.environ, "LAUNCHER_FOLLOW_STATE": mode, "PYTHONPATH": str(REPO / "src")}
    fs = FLOW_SCHEMA.format(ns=a.namespace)
    runs = tmp / f"runs-{mode}-{len(jobs)}"
    p = subprocess.Popen([sys.executable, __file__, "--child", "--kubeconfig", a.follower_kubeconfig, "--namespace",
                          a.namespace, "--runs", str(runs), "--jobs", ",".join(jobs), "--warmup", str(a.warmup),
                          "--window", str(a.window)], env=env, stdout=subprocess.PIPE, text=True)
    m0 = m1 = None
    info = {}
    for line in p.stdout:
        if line.startswith("MARK0"):
            m0 = scrape(kube, fs)
        elif line.startswith("MARK1"):
            m1 = scrape(kube, fs)
            info = json.loads(line.split(" ", 1)[1])
    p.wait(120)
    if m0 is None or m1 is None:
        raise SystemExit(f"the {mode} follower of {len(jobs)} runs ended early (exit {p.returncode})")
    return {"mode": mode, "runs": len(jobs), "server": m1 - m0, **info}


def setup(kube, a, n: int):
    """N simulated runs in the namespace, all Running on KWOK nodes, each served a live verl log."""
    import kwok_support as ks
    import simlog
    from launcher.cli.commands.submit import create_all
    from launcher.spec.load import load_spec
    from launcher.kube import POD
    from launcher.render.manifests import render
    from launcher_helpers import serve_namespace

    ann = json.dumps({ks.POD_COMPLETE_DELAY: "1800s"})
    jobs = []
    for i in range(n):
        spec = load_spec(CONFIG, [
            "workload=smoke", "resources.gpus_per_node=0", 'resources.cpu="1"', "resources.memory=1Gi",
            "resources.shm_size=64Mi", 'scheduling.node_selector={"type":"kwok"}',
            f"scheduling.namespace={a.namespace}",
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
        with tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp:
            a.follower_kubeconfig = isolate(info, a.namespace, Path(tmp))
            t0 = time.monotonic()
            jobs, live = setup(kube, a, max(sizes))
            print(f"# {max(sizes)} simulated runs Running in {a.namespace} after {time.monotonic() - t0:.0f} s",
                  file=sys.stderr)
            for n in sizes:
                for mode in ("poll", "watch"):
                    r = window(kube, a, mode, jobs[:n], Path(tmp))
                    results.append(r)
                    print(f"# {mode} {n}: {split(r['server'])[0]:.0f} requests in the window", file=sys.stderr)
    finally:
        if live is not None:
            live.stop()
        info.kubectl("delete", "flowschema", FLOW_SCHEMA.format(ns=a.namespace), "--ignore-not-found", check=False)
        info.kubectl("delete", "clusterlogs", f"{a.namespace}-all", "--ignore-not-found", "--wait=false",
                     check=False)
        info.kubectl("delete", "pytorchjobs", "--all", "-n", a.namespace, "--wait=false", check=False)
        info.kubectl("delete", "namespace", a.namespace, "--wait=false", check=False)
    per_min = 60.0 / a.window
    print(f"window {a.window:g} s of steady state after {a.warmup:g} s warm-up; one follower process per case")
    print("| runs | mode | API requests/run/min beyond log streams (server: APF, the follower's FlowSchema) | "
          "same, client-side count | follower CPU in the window (% of a core) | peak RSS (MiB) | log lines read |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        mine, _ = split(r["server"])
        n = r["runs"]
        client = sum(v for k, v in r["client"].items() if not k.startswith("log"))
        print(f"| {n} | {r['mode']} | {mine * per_min / n:.2f} | {client * per_min / n:.2f} | "
              f"{100 * r['cpu_s'] / a.window:.1f} | {r['peak_rss_mib']:.0f} | {r['lines']} |")
    print("\nclient-side detail per case (the follower's requests in the window; `log` = log streams opened):")
    for r in results:
        print(f"  {r['mode']:5} {r['runs']:3}: {dict(sorted(r['client'].items()))}")
    print("server-side apiserver_request_total on pods/pytorchjobs in the window (everyone's, for context):")
    for r in results:
        print(f"  {r['mode']:5} {r['runs']:3}: {split(r['server'])[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
