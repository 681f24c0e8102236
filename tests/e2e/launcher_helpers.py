"""Helpers for the launcher's end-to-end tests (submit/logs/faults) on the local cluster.

A *served run*: a simlog-generated verl log served for the job's pod through KWOK `Logs`, written in
CRI format with strictly increasing timestamps (as a real container runtime writes them), part of it
up front and the rest appended while the pod runs.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import kwok_support as ks

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "grpo-exp3.yaml")
PY = sys.executable


def cri(lines: list[str], start: dt.datetime | None = None, step_us: int = 1000) -> str:
    """CRI log text with increasing timestamps ending at about now (never in the future)."""
    start = start or dt.datetime.now(dt.timezone.utc) - dt.timedelta(microseconds=step_us * (len(lines) + 1))
    return "".join(f"{ks._ts(start + dt.timedelta(microseconds=i * step_us))} stdout F {ln}\n"
                   for i, ln in enumerate(lines))


def verl_lines(steps: int, seed: int = 0) -> list[str]:
    import simlog

    return [ln.rstrip("\n") for ln in simlog.generate(steps=steps, seed=seed)]


def expected_rows(steps: int, seed: int = 0) -> list[dict]:
    import simlog

    return json.loads(json.dumps(simlog.expected_rows(steps=steps, seed=seed)))


def launcher(args: list[str], info: ks.ClusterInfo, runs: Path, *, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
             **kw) -> subprocess.Popen:
    """The launcher in the background (stdout/stderr: pipes, or files for a long run whose output would fill a pipe
    nobody reads until it ends)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(info.kubeconfig), LAUNCHER_RUNS_DIR=str(runs), PYTHONUNBUFFERED="1",
               PYTHONPATH=str(REPO / "src"))
    return subprocess.Popen([PY, "-m", "launcher", *args], env=env, stdout=stdout, stderr=stderr, text=True, **kw)


def run_launcher(args: list[str], info: ks.ClusterInfo, runs: Path, timeout: float = 120):
    p = launcher(args, info, runs)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def submit_args(ns: str, steps: int, delay: str, *extra: str) -> list[str]:
    ann = json.dumps({ks.POD_COMPLETE_DELAY: delay})
    return ["submit", CONFIG, "-n", ns, "--set", f"trainer.total_training_steps={steps}",
            "--set", f"scheduling.pod_annotations={ann}", *extra]


def job_name(ns: str, steps: int, delay: str, *sets: str) -> str:
    from launcher.spec.load import load_spec

    ann = json.dumps({ks.POD_COMPLETE_DELAY: delay})
    return load_spec(CONFIG, [f"scheduling.namespace={ns}", f"trainer.total_training_steps={steps}",
                              f"scheduling.pod_annotations={ann}", *sets]).job_name


def rows(run: Path) -> list[dict]:
    p = run / "metrics.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def raw_lines(path: Path) -> list[str]:
    """A saved raw log as lines (split on \\n only: verl's tqdm lines carry \\r inside)."""
    return path.read_bytes().decode().split("\n")[:-1]


@dataclass
class ServedRun:
    """A live log for one pod: `start()` appends the rest of `lines` every `interval` seconds."""

    path: Path
    lines: list[str]
    initial: int

    def start(self, interval: float) -> ks.LiveLog:
        live = ks.LiveLog(self.path)

        def gen():
            yield from self.lines[self.initial:]

        # LiveLog writes with the current time: strictly after the initial (past) timestamps
        return live.start(gen(), interval=interval)


def serve_run(info: ks.ClusterInfo, ns: str, pod: str, lines: list[str], initial: int) -> ServedRun:
    """Serve `lines[:initial]` for `pod` now (the rest via `ServedRun.start`).

    Writes the CRI file itself: kwok_support's converter splits on \r too, which breaks verl's tqdm lines.
    """
    path = ks.served_file(info, ns, pod)
    path.write_text(cri(lines[:initial]))
    body = {"apiVersion": f"{ks.KWOK_GROUP}/{ks.KWOK_VERSION}", "kind": "Logs",
            "metadata": {"name": pod, "namespace": ns}, "spec": {"logs": [{"logsFile": str(path), "follow": True}]}}
    ks._apply_custom(info.api_client(), "logs", body, ns)
    return ServedRun(path, lines, initial)


def serve_namespace(info: ks.ClusterInfo, ns: str, lines: list[str]) -> Path:
    """Serve `lines` to every pod of `ns` (ClusterLogs; for pods with generated names)."""
    path = ks.served_file(info, ns, "clusterlogs-all")
    path.write_text(cri(lines))
    body = {"apiVersion": f"{ks.KWOK_GROUP}/{ks.KWOK_VERSION}", "kind": "ClusterLogs",
            "metadata": {"name": f"{ns}-all", "labels": {ks.E2E_NAMESPACE_LABEL: ns}},
            "spec": {"selector": {"matchNamespaces": [ns]}, "logs": [{"logsFile": str(path), "follow": True}]}}
    ks._apply_custom(info.api_client(), "clusterlogs", body, None)
    return path


def wait_saved_log_bytes(run: Path, pod: str, n: int, timeout: float) -> int:
    """Until the follower's saved state (`logs/.follow-state.json`) records at least `n` bytes of `pod`'s raw log
    as handled: what a follower killed after that point must not print again. Returns the recorded length."""
    state = run / "logs" / ".follow-state.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            saved = int(json.loads(state.read_text()).get("files", {}).get(f"{pod}.log", 0))
        except (OSError, ValueError):  # not written yet (it is replaced atomically, never torn)
            saved = 0
        if saved >= n:
            return saved
        time.sleep(0.1)
    raise TimeoutError(ks.hang_guard(f"{n} bytes of {pod}.log saved as handled in {state}", timeout))


def wait_file_rows(run: Path, n: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = rows(run)
        except ValueError:  # a row being written
            r = []
        if len(r) >= n:
            return r
        time.sleep(0.1)
    raise TimeoutError(ks.hang_guard(f"{n} metric rows in {run}", timeout))
