"""The progress line: step/total, elapsed, ETA from the pace since the first step, reward, throughput."""
from __future__ import annotations

import io

from rich.console import Console

from launcher.metrics import StepRecord
from launcher.cli.progress import RunProgress


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


def _steps(n, start=1):
    return [StepRecord(s, {"critic/score/mean": s / 10, "response_length/mean": 100.0 + s, "actor/pg_loss": -0.01 * s,
                           "timing_s/step": 12.5, "perf/throughput": 1000.0 + s}) for s in range(start, start + n)]


def test_table_mode_on_a_terminal_shows_the_last_steps_and_the_line():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    p = RunProgress("exp-1", 25, console=console, clock=lambda: 0.0, table_rows=3)
    with p:
        p.records(_steps(5))
        p.records(_steps(1, start=4))  # a re-run step 4 (restarted container) replaces its row, now newest
    assert "resp len" in out.getvalue() and "exp-1 | step 5/25" in out.getvalue()  # drawn live on the terminal
    plain = Console(file=io.StringIO(), width=160, record=True)
    plain.print(p.renderable())
    final = plain.export_text()  # the last frame, without the terminal's cursor moves
    rows = [ln.split() for ln in final.splitlines() if ln.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["3", "5", "4"], final  # the last 3 steps, in arrival order
    assert rows[0][:3] == ["3", "0.3", "103"] and rows[0][4] == "-"  # a metric the step lacks shows as -
    header = next(ln for ln in final.splitlines() if ln.lstrip().startswith("step "))
    assert header.split() == ["step", "score", "resp", "len", "pg", "loss", "kl", "grad", "norm", "step", "s", "tok/s"]
    assert "exp-1 | step 5/25" in final


def test_line_mode_keeps_todays_output():
    out = io.StringIO()
    p = RunProgress("exp-1", 25, console=Console(file=out, force_terminal=False, width=300), clock=lambda: 0.0)
    with p:
        p.records(_steps(2))
    assert "resp len" not in out.getvalue() and out.getvalue().count("\n") == 2  # the new step + the closing line


def test_display_mode_table_only_on_a_terminal_without_logs():
    from launcher.cli.commands.submit import display_mode

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert display_mode(False, Tty()) == "table"
    assert display_mode(True, Tty()) == "lines"
    assert display_mode(False, io.StringIO()) == "lines"


def test_failed_table_follow_shows_the_saved_tail(tmp_path, capsys):
    from launcher.cli.commands.submit import show_saved_tail
    from launcher.run.dirs import RunDir

    run = RunDir(tmp_path / "exp-1").ensure()
    (run.logs / "exp-1-master-0.log").write_text("".join(f"line {i}\n" for i in range(30)) + "RuntimeError: OOM\n")
    show_saved_tail(run, "exp-1", tail=3)
    err = capsys.readouterr().err.splitlines()
    assert err == ["[master-0] line 28", "[master-0] line 29", "[master-0] RuntimeError: OOM", f"(full logs: {run.logs}/)"]
