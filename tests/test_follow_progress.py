"""The progress line: step/total, elapsed, ETA from the pace since the first step, reward, throughput."""
from __future__ import annotations

import io

from rich.console import Console

from launcher.metrics import StepRecord
from launcher.progress import RunProgress


def test_progress_line_and_eta():
    now = [100.0]
    out = io.StringIO()
    p = RunProgress("exp-1", 10, console=Console(file=out, force_terminal=False, width=300), clock=lambda: now[0])
    assert "step -/10" in p.render() and "ETA --:--" in p.render()
    now[0] = 160.0
    p.records([StepRecord(1, {"critic/score/mean": 0.25, "perf/throughput": 1234.5})])
    now[0] = 180.0
    p.records([StepRecord(2, {"critic/score/mean": 0.5, "perf/throughput": 1300.0})])
    line = p.render()
    # 20 s per step since step 1, 8 steps left -> 160 s
    assert "step 2/10" in line and "elapsed 01:20" in line and "ETA 02:40" in line
    assert "critic/score/mean 0.5" in line and "perf/throughput 1300" in line
    assert out.getvalue().count("\n") == 2  # not a terminal: one printed line per new step
