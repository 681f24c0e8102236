#!/usr/bin/env python3
"""Container start -> verl's first step of a real grpo-exp3-cpu run, by phase, in the CPU image (no cluster).

usage: bench/bench_first_step.py [--before SRC] [--steps 2] [--quota 150000]

Runs the rendered PyTorchJob pod's init and trainer containers as the pod would (their commands, environment, the
spec mounted at /etc/grpo, writable /workspace, /tmp, $HOME and /dev/shm, uid 1000) with `buildah run` (chroot
isolation, host network) from the image `make image-cpu` built, inside a cgroup-v1 CPU quota like the pod's limit
(1500m), and stamps every line of the trainer's output with the seconds since its container started. It prints each
phase's time (the stamps of the lines verl, Ray and vLLM print at each stage) and the total CPU the run used. With
`--before SRC` (a `src/` of an earlier commit: `git archive REV src | tar -x -C DIR`) it first runs the same with that
launcher package bound over the image's, and prints the ratio of each figure to it: the baseline of the same run.

Needs root (buildah, cgroups), the image in buildah's storage and .venv (render). What it cannot show: the kubelet's
part (image pull, volume set-up, the pod sandbox), a few seconds on the local cluster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GRPO_CACHE", Path.home() / ".cache" / "grpo-launcher"))
SITE = "/opt/venv/lib/python3.11/site-packages/launcher"
# Each phase ends at the first line holding its marker (what verl, Ray and vLLM print at that stage).
PHASES = [
    ("verl imported (driver)", "Platform override from VERL_PLATFORM"),
    ("Ray started", "Started a local Ray instance"),
    ("TaskRunner up", "(TaskRunnerV1 pid="),
    ("dataloader", "train and validate dataloader initialized"),
    ("actor engine", "actor and ref model engine initialized"),
    ("vLLM server actor", "['serve',"),
    ("vLLM EngineCore", "(EngineCore pid="),
    ("vLLM worker", "(Worker pid="),
    ("ready to fit", "all initialize finished, ready to fit"),
    ("agent-loop workers", "(AgentLoopWorkerTQ pid="),
    ("first step", " step:1 "),
]


def buildah_env() -> dict[str, str]:
    b = CACHE / "buildah"
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(b / "storage.conf"), "CONTAINERS_CONF": str(b / "containers.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(b / "registries.conf"), "BUILDAH_ISOLATION": "chroot"}


def render(steps: int) -> tuple[dict, dict]:
    """The ConfigMap's files and the master pod spec of grpo-exp3-cpu at `steps` steps."""
    out = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "launcher", "render", "configs/grpo-exp3-cpu.yaml",
                          "--set", f"trainer.total_training_steps={steps}", "--set", "trainer.total_epochs=1"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    files = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    pod = next(d for d in docs if d["kind"] == "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    return files, pod


def container_env(c: dict) -> dict[str, str]:
    fields = {"metadata.name": "bench-pod", "metadata.namespace": "bench", "status.podIP": "127.0.0.1"}
    env = {}
    for e in c.get("env", []):
        value = e.get("value", fields.get(e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath"), ""))
        env[e["name"]] = value.replace("$(POD_NAME)", "bench-pod")
    return env


class Cgroup:
    """A cgroup-v1 cpu (quota) + cpuacct (usage) pair the run's processes are put in."""

    def __init__(self, name: str, quota_us: int):
        self.cpu, self.acct = Path("/sys/fs/cgroup/cpu") / name, Path("/sys/fs/cgroup/cpuacct") / name
        for d in (self.cpu, self.acct):
            d.mkdir(exist_ok=True)
        (self.cpu / "cpu.cfs_period_us").write_text("100000")
        (self.cpu / "cpu.cfs_quota_us").write_text(str(quota_us))

    def join(self) -> None:
        for d in (self.cpu, self.acct):
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def usage_s(self) -> float:
        return int((self.acct / "cpuacct.usage").read_text()) / 1e9


def run_once(label: str, steps: int, quota: int, src: Path | None) -> dict:
    files, pod = render(steps)
    env = buildah_env()
    image = pod["containers"][0]["image"]
    work = Path(tempfile.mkdtemp(prefix=f"first-step-{label}-"))
    for d in ("etc", "ws", "tmp", "home", "shm"):
        (work / d).mkdir()
        (work / d).chmod(0o777)
    for name, text in files.items():
        (work / "etc" / name).write_text(text)
    vols = [f"{work}/etc:/etc/grpo:ro", f"{work}/ws:/workspace", f"{work}/tmp:/tmp", f"{work}/home:/home/verl",
            f"{work}/shm:/dev/shm"] + ([f"{src / 'launcher'}:{SITE}:ro"] if src else [])
    ctr = subprocess.run(["buildah", "from", "--pull=never", image], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    group = Cgroup(f"bench-first-step-{label}", quota)
    result: dict = {"label": label}
    try:
        for c in (pod["initContainers"][0], pod["containers"][0]):
            cmd = ["buildah", "run", "--user", "1000:1000", "--network", "host"]
            for v in vols:
                cmd += ["-v", v]
            for k, v in container_env(c).items():
                cmd += ["--env", f"{k}={v}"]
            argv = [*(c.get("command") or []), *c.get("args", [])]
            before, t0 = group.usage_s(), time.monotonic()
            p = subprocess.Popen([*cmd, ctr, "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                 preexec_fn=group.join)
            stamped = [(time.monotonic() - t0, line.decode(errors="replace")) for line in iter(p.stdout.readline, b"")]
            if p.wait() != 0:
                sys.exit(f"{label}: {c['name']} exited {p.returncode}:\n" + "".join(l for _, l in stamped[-40:]))
            result[c["name"]] = {"wall": time.monotonic() - t0, "cpu": group.usage_s() - before, "lines": stamped}
    finally:
        subprocess.run(["buildah", "rm", ctr], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    lines = result[pod["containers"][0]["name"]]["lines"]
    result["phases"] = {name: next((t for t, line in lines if marker in line), None) for name, marker in PHASES}
    result["trainer"] = result.pop(pod["containers"][0]["name"])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="an earlier src/ to measure first, as the baseline")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--quota", type=int, default=150000, help="CPU quota in µs per 100 ms (150000 = the pod's 1500m)")
    a = ap.parse_args()
    runs = ([run_once("before", a.steps, a.quota, a.before)] if a.before else []) + \
        [run_once("now", a.steps, a.quota, None)]
    head = f"{'phase (s since the trainer container started)':<46}" + "".join(f"{r['label']:>10}" for r in runs)
    print(head + ("     ratio" if a.before else ""))
    for name, _ in PHASES:
        vals = [r["phases"][name] for r in runs]
        cells = "".join(f"{v:10.1f}" if v is not None else f"{'-':>10}" for v in vals)
        ratio = f"{vals[-1] / vals[0]:10.2f}" if a.before and None not in vals and vals[0] else ""
        print(f"{name:<46}{cells}{ratio}")
    for key in ("wall", "cpu"):
        vals = [r["trainer"][key] for r in runs]
        ratio = f"{vals[-1] / vals[0]:10.2f}" if a.before else ""
        print(f"{'trainer container ' + key + ' (s, ' + str(a.steps) + ' steps)':<46}"
              + "".join(f"{v:10.1f}" for v in vals) + ratio)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
