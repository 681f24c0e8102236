"""Orchestration overhead: grpo-exp3-cpu through `launcher submit` on a real node vs bare verl, side by side.

    python bench/bench_overhead.py [--config configs/grpo-exp3-cpu.yaml] [--set KEY=VALUE ...]

Both runs train the same config for real (verl 0.9.1 on CPU, the built-in tiny model) on the same machine, one
after the other, with the same image, CPU limit, memory limit and /dev/shm size:

- launcher: `python -m launcher submit CONFIG --follow --new` on the local cluster's real node 0 (API server,
  training-operator, kubelet, init container that prepares the data, the entrypoint, Ray, verl).
- bare: the same image run with `ctr run` on that node's containerd (host network, no Kubernetes, no launcher
  entrypoint): the data prepared by the same code, then `python3 -m verl.trainer.main_ppo` exec'd with the
  identical override list and environment the entrypoint would give it (`verl_argv`, `env_for`; the script is
  BARE below). So the ratio is what the orchestration costs, not a difference in what verl was asked to do.

Figures, for each: time to first step (command start to the first `step:1 - ` line on its output), median steady
step time (verl's own `timing_s/step`, steps 2..N, read by the launcher's parser from each run's output) and the
wall time to the end; then launcher / bare ratios. Needs `GRPO_REAL_NODE=1 make cluster-up` (the image imported
on the node) and root (ctr). Not a test: it occupies the machine for two full runs (~10 min on 2 cores; `--set trainer.total_training_steps=10`
for ~5 min).

First run: 2026-12-04, 10 steps (bench/RESULTS.md "Orchestration overhead"): first step 1.002x, steady step 0.993x.
The bare container keeps ctr's default RLIMIT_NOFILE of 1024 (Ray warns about it; ctr 1.6 has no flag to raise it),
where the pod gets containerd's CRI default.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
CACHE = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher"))
CLUSTER = Path(os.environ.get("GRPO_CLUSTER_DIR", CACHE / "cluster"))
KUBECONFIG = CLUSTER / "kubeconfig"
KUBECTL = CACHE / "bin" / "tools" / "kubectl"
NODE = CLUSTER / "nodes" / "0"  # hack/cluster/node.sh node_vars 0
STEP1 = "step:1 - "

# Inside the container: what the entrypoint does for a single-node run, minus the entrypoint's own supervision
# (no tracking run, no resume decision on an empty volume, no log relaying): prepare the data, then exec verl.
BARE = """
import os, sys
from launcher.spec.load import load_spec
from launcher.entrypoint import environment as E
from launcher.entrypoint import __main__ as M
from launcher.entrypoint.ray_cluster import operator_env
spec = load_spec(sys.argv[1])
env = operator_env(os.environ)
role, _ = M.detect_role(spec, env, lenient=True)
M._prepare_data(spec, None)
probe = E.probe_container()
delta = E.env_for(spec, env, role=role, probe=probe, attempt="bare-0")
if delta.get("VERL_FILE_LOGGER_PATH"):  # the entrypoint makes its directory (verl's file logger does not)
    os.makedirs(os.path.dirname(delta["VERL_FILE_LOGGER_PATH"]), exist_ok=True)
argv = M.verl_argv(spec, role, cpus=probe.cpus, mode="train", model=None, env=env)
print("[bare] role=%s cpus=%s: %s" % (role, probe.cpus, " ".join(argv[:3])), flush=True)
os.execvpe(argv[0], argv, {**env, **delta})
"""


def timed_stream(cmd: list[str], env: dict | None, out_path: Path) -> dict:
    """Run `cmd`, copy its merged output to `out_path`, note when the first `step:1 - ` line arrived."""
    t0 = time.monotonic()
    first: list[float] = []
    with open(out_path, "w", encoding="utf-8") as out:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in p.stdout:
            if not first and STEP1 in line:
                first.append(time.monotonic() - t0)
            out.write(line)
        rc = p.wait()
    return {"rc": rc, "wall_s": round(time.monotonic() - t0, 1), "first_step_s": round(first[0], 1) if first else None}


def steady_step(lines) -> tuple[float | None, int]:
    """Median `timing_s/step` over steps 2..N (step 1 carries vLLM's and the first update's warm-up)."""
    from launcher.metrics.parser import parse_line

    times = {}
    for ln in lines:
        rec = parse_line(ln.rstrip("\n").split("] ", 1)[-1] if ln.startswith("[") else ln.rstrip("\n"))
        if rec is not None and "timing_s/step" in rec.metrics:
            times[rec.step] = rec.metrics["timing_s/step"]
    steady = [v for s, v in times.items() if s >= 2]
    return (round(statistics.median(steady), 2) if steady else None), len(times)


def launcher_run(config: str, sets: list[str], work: Path) -> dict:
    ns = f"bench-ovh-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(KUBECONFIG), LAUNCHER_RUNS_DIR=str(work / "runs"), PYTHONPATH=str(ROOT / "src"))
    kc = [str(KUBECTL), "--kubeconfig", str(KUBECONFIG)]
    subprocess.run([*kc, "create", "namespace", ns], check=True, capture_output=True)
    try:
        cmd = [sys.executable, "-m", "launcher", "submit", config, "-n", ns, "--follow", "--new"]
        for s in sets:
            cmd += ["--set", s]
        r = timed_stream(cmd, env, work / "launcher.out")
    finally:
        subprocess.run([*kc, "delete", "namespace", ns, "--wait=false"], capture_output=True)
    [run] = list((work / "runs").iterdir())
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steady = [r_["timing_s/step"] for r_ in rows if r_.get("step", 0) >= 2 and "timing_s/step" in r_]
    r.update(steady_step_s=round(statistics.median(steady), 2) if steady else None, steps=len(rows))
    return r


def bare_run(config: str, sets: list[str], work: Path) -> dict:
    from launcher.spec.load import dump_spec, load_spec

    spec = load_spec(config, sets)
    res = spec.resources
    (work / "etc").mkdir()
    (work / "etc" / "spec.yaml").write_text(dump_spec(spec))
    os.chmod(work / "etc", 0o755)
    os.chmod(work / "etc" / "spec.yaml", 0o644)
    ref = spec.image
    name = f"bench-bare-{uuid.uuid4().hex[:6]}"
    cpus = float(res.cpu[:-1]) / 1000 if str(res.cpu).endswith("m") else float(res.cpu)
    mem = int(str(res.memory).rstrip("Gi")) << 30
    shm = str(res.shm_size).rstrip("i").lower()
    tmpfs = "type=tmpfs,src=tmpfs,dst={},options=rw:nosuid:nodev:uid=1000:gid=1000"
    ctr = ["ctr", "--address", str(NODE / "containerd.sock"), "-n", "k8s.io"]
    # The pod's environment, less the downward API (no pod here); the entrypoint's env_for adds the rest.
    envs = {"LAUNCHER_SPEC": "/etc/grpo/spec.yaml", "PYTHONUNBUFFERED": "1", "HOME": "/home/verl",
            "HF_HOME": "/workspace/hf", "RAY_COLOR_PREFIX": "0", "RAY_DEDUP_LOGS": "0", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "POD_NAME": name, "NCCL_IB_DISABLE": "1"}
    cmd = [*ctr, "run", "--rm", "--net-host", "--read-only", "--runc-root", str(NODE / "runc"),
           "--cgroup", f"/grpo-node-0/{name}", "--cpus", str(cpus), "--memory-limit", str(mem),
           "--mount", tmpfs.format("/workspace"), "--mount", tmpfs.format("/tmp"),
           "--mount", tmpfs.format("/home/verl"),
           "--mount", f"type=tmpfs,src=shm,dst=/dev/shm,options=rw:nosuid:nodev:size={shm}",
           "--mount", f"type=bind,src={work / 'etc'},dst=/etc/grpo,options=rbind:ro",
           *[a for k, v in envs.items() for a in ("--env", f"{k}={v}")],
           ref, name, "python3", "-c", BARE, "/etc/grpo/spec.yaml"]
    r = timed_stream(cmd, None, work / "bare.out")
    with open(work / "bare.out", encoding="utf-8") as f:
        r["steady_step_s"], r["steps"] = steady_step(f)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "grpo-exp3-cpu.yaml"))
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    if not (NODE / "containerd.sock").exists():
        sys.exit(f"no real node 0 ({NODE / 'containerd.sock'}): run GRPO_REAL_NODE=1 make cluster-up first")
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    (work / "l").mkdir()
    (work / "b").mkdir()
    lr = launcher_run(a.config, a.sets, work / "l")
    br = bare_run(a.config, a.sets, work / "b")
    out = {"launcher": lr, "bare": br, "outputs": str(work)}
    for k in ("first_step_s", "steady_step_s", "wall_s"):
        if lr.get(k) and br.get(k):
            out[f"ratio_{k}"] = round(lr[k] / br[k], 3)
    print(f"launcher submit (real node): first step {lr['first_step_s']} s, steady step {lr['steady_step_s']} s, "
          f"wall {lr['wall_s']} s, {lr['steps']} steps, rc {lr['rc']}")
    print(f"bare verl (ctr run, same image/limits): first step {br['first_step_s']} s, steady step "
          f"{br['steady_step_s']} s, wall {br['wall_s']} s, {br['steps']} steps, rc {br['rc']}")
    print("ratios launcher / bare: " + ", ".join(f"{k[6:]} {v}x" for k, v in out.items() if k.startswith("ratio_")))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
