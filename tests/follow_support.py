"""What the follower tests share: a run directory's metrics rows and raw log lines, and a polling wait."""

from __future__ import annotations

import json
import time

from launcher.run.dirs import RunDir

POD = "exp-12345678-master-0"


def rows(run_dir: RunDir) -> list[dict]:
    p = run_dir.path / "metrics.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def raw(run_dir: RunDir, name=POD) -> list[str]:
    return run_dir.pod_log(name).read_bytes().decode().split("\n")[:-1]


def wait_until(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False
