"""The live display of a followed run: step/total, elapsed, ETA, latest reward and throughput.

Two forms:

- with log lines (`submit --follow --logs`, `logs -f`, any non-terminal stdout): rendered with rich on
  stderr so stdout carries only log lines (pipe-friendly). On a terminal it is a live line under the
  scrolling log; elsewhere (CI, pipes) it prints one status line per new step.
- as a table (`submit --follow` on a terminal, `table_rows > 0`): a compact table of the last steps'
  key metrics above the same status line, live, in place of the raw lines (which still go to the run
  directory).

A followed sweep has one view (`SweepView`): a row per run (its axis values, phase, step/total, latest score,
elapsed). On a terminal it is a rich live table on stderr with notices printed above it; elsewhere (CI, pipes) it
prints one line per run per new step or phase change, so a log of the sweep stays readable. Callbacks come from every run's
follower thread: they only update state under a lock, and the display is redrawn from that state.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

TABLE_ROWS = 10  # steps the --follow table keeps on screen: enough to see a trend, small enough for any terminal
REWARD_KEY = "critic/score/mean"
THROUGHPUT_KEY = "perf/throughput"
# The step table's columns: (header, verl metric key). What a GRPO user watches step to step: reward,
# response length (clipping shows here first), policy loss, KL, gradient norm, time per step, throughput.
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("score", REWARD_KEY),
    ("resp len", "response_length/mean"),
    ("pg loss", "actor/pg_loss"),
    ("kl", "actor/ppo_kl"),
    ("grad norm", "actor/grad_norm"),
    ("step s", "timing_s/step"),
    ("tok/s", THROUGHPUT_KEY),
)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(max(seconds, 0))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


class _LiveView:
    """A rich `Live` display on a terminal (`renderable()` redrawn on `_show()`), plain lines elsewhere."""

    console: Console
    refresh_per_second = 4
    redirect_stderr = False

    def renderable(self):
        raise NotImplementedError

    def __enter__(self):
        self._live = None
        if self.console.is_terminal:
            self._live = Live(self.renderable(), console=self.console, refresh_per_second=self.refresh_per_second,
                              transient=False, redirect_stdout=True, redirect_stderr=self.redirect_stderr)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self.renderable())
            self._live.__exit__(*exc)
            self._live = None
        else:
            self.final()

    def final(self) -> None:
        """What a run without a terminal prints last."""

    def _show(self) -> bool:
        """Redraw the live display; False when there is none (print a line instead)."""
        if getattr(self, "_live", None) is None:
            return False
        self._live.update(self.renderable())
        return True


class RunProgress(_LiveView):
    """Tracks steps and job phase; `render()` gives the one-line summary the display shows."""

    def __init__(self, job: str, total_steps: int | None, *, console: Console | None = None,
                 clock=time.monotonic, table_rows: int = 0):
        self.job = job
        self.total = total_steps
        self.console = console or Console(stderr=True)
        self.clock = clock
        self.t0 = clock()
        self.step: int | None = None
        self.first_step_at: float | None = None
        self.first_step: int | None = None
        self.reward: float | None = None
        self.throughput: float | None = None
        self.phase = "Pending"
        self._live: Live | None = None
        self._last_printed_step: int | None = None
        self.table_rows = table_rows
        self.steps: OrderedDict[int, dict] = OrderedDict()  # step -> metrics, the table's last rows

    # updates ---------------------------------------------------------------------------------

    def records(self, recs) -> None:
        for r in recs:
            if r.step == 0:
                continue  # step 0 is validation before training, not progress
            if self.first_step_at is None:
                self.first_step_at, self.first_step = self.clock(), r.step
            if self.table_rows:
                self.steps[r.step] = r.metrics  # a re-run step (restarted container) replaces its row
                self.steps.move_to_end(r.step)
                while len(self.steps) > self.table_rows:
                    self.steps.popitem(last=False)
            if self.step is None or r.step >= self.step:
                self.step = r.step
                self.reward = r.metrics.get(REWARD_KEY, self.reward)
                self.throughput = r.metrics.get(THROUGHPUT_KEY, self.throughput)
        self._refresh()

    def status(self, state, pods) -> None:
        phases = ",".join(sorted({(p.get("status") or {}).get("phase", "?") for p in pods})) or "no pods"
        self.phase = f"{state.phase} (pods: {phases})"
        self._refresh()

    # display ---------------------------------------------------------------------------------

    def eta(self) -> float | None:
        """Seconds left, from the pace since the first step seen (excludes startup time)."""
        if not self.total or self.step is None or self.first_step_at is None or self.step <= self.first_step:
            return None
        pace = (self.clock() - self.first_step_at) / (self.step - self.first_step)
        return pace * max(self.total - self.step, 0)

    def render(self) -> str:
        step = "-" if self.step is None else str(self.step)
        total = f"/{self.total}" if self.total else ""
        parts = [f"{self.job}", f"step {step}{total}", f"elapsed {_clock(self.clock() - self.t0)}",
                 f"ETA {_clock(self.eta())}"]
        if self.reward is not None:
            parts.append(f"{REWARD_KEY} {self.reward:.4g}")
        if self.throughput is not None:
            parts.append(f"{THROUGHPUT_KEY} {self.throughput:.4g}")
        parts.append(self.phase)
        return " | ".join(parts)

    def table(self) -> Table:
        """The last `table_rows` steps, one row each, oldest first (steps in the order they arrived)."""
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        table.add_column("step", justify="right")
        for header, _ in TABLE_COLUMNS:
            table.add_column(header, justify="right")
        for step, metrics in self.steps.items():
            table.add_row(str(step), *(_cell(metrics.get(key)) for _, key in TABLE_COLUMNS))
        return table

    def renderable(self):
        """What the live display shows: the status line, under the step table in table mode."""
        line = Text(self.render())
        return Group(self.table(), line) if self.table_rows else line

    @property
    def redirect_stderr(self) -> bool:
        # table mode owns the terminal: notices printed to stderr meanwhile go above the display too
        return bool(self.table_rows)

    def final(self) -> None:
        self.console.print(self.render(), highlight=False, soft_wrap=True)

    def _refresh(self) -> None:
        if self._show():
            return
        if self.step is not None and self.step != self._last_printed_step:
            self._last_printed_step = self.step
            self.console.print(self.render(), highlight=False, soft_wrap=True)


def _cell(value) -> str:
    """A metric for the table: 4 significant digits, `-` when the step did not report it."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    return f"{value:.4g}"


def print_line(pod: str, line: str, stream=None) -> None:
    """`[master-0] text` on stdout (flushed: a follower's output is read live)."""
    out = stream or sys.stdout
    out.write(f"[{pod}] {line}\n")
    out.flush()


class SweepView(_LiveView):
    """Live progress of every member of a sweep (see the module docstring)."""

    def __init__(self, sweep, *, console: Console | None = None, clock=time.monotonic):
        self.console = console or Console(stderr=True)
        self.clock = clock
        self.t0 = clock()
        self.varied = sweep.varied
        self.rows = {m.job: {"params": m.params, "total": m.spec.trainer.total_training_steps, "step": None,
                             "score": None, "phase": "Pending", "printed": None} for m in sweep.members}
        self._lock = threading.Lock()
        self._live: Live | None = None

    def records(self, job: str, recs) -> None:
        with self._lock:
            row = self.rows[job]
            for r in recs:
                if r.step == 0:
                    continue  # validation before training, not progress
                if row["step"] is None or r.step >= row["step"]:
                    row["step"] = r.step
                    row["score"] = r.metrics.get(REWARD_KEY, row["score"])
        self._update(job)

    def status(self, job: str, state, pods) -> None:
        with self._lock:
            self.rows[job]["phase"] = state.phase
        self._update(job)

    def notice(self, msg: str) -> None:
        self.console.print(msg, highlight=False, soft_wrap=True)

    refresh_per_second = 2
    redirect_stderr = True  # notices go above the table

    def tick(self) -> None:
        self._show()

    def renderable(self) -> Table:
        return self.table()

    def line(self, job: str) -> str:
        row = self.rows[job]
        step = "-" if row["step"] is None else str(row["step"])
        params = " ".join(f"{k}={v}" for k, v in row["params"].items())
        score = f" | {REWARD_KEY} {row['score']:.4g}" if row["score"] is not None else ""
        return f"{job} ({params}) | step {step}/{row['total']}{score} | {row['phase']}"

    def table(self) -> Table:
        done = sum(1 for r in self.rows.values() if r["phase"] in ("Succeeded", "Failed", "Deleted"))
        table = Table(title=f"sweep: {done}/{len(self.rows)} finished, elapsed {_clock(self.clock() - self.t0)}",
                      box=None, header_style="bold", title_justify="left")
        table.add_column("run")
        for k in self.varied:
            table.add_column(k.rsplit(".", 1)[-1], justify="right")
        for col in ("step", "score", "phase"):
            table.add_column(col, justify="right" if col != "phase" else "left")
        with self._lock:
            for job, r in self.rows.items():
                step = "-" if r["step"] is None else f"{r['step']}/{r['total']}"
                table.add_row(job, *(str(r["params"].get(k)) for k in self.varied), step,
                              "-" if r["score"] is None else f"{r['score']:.4g}", r["phase"])
        return table

    def _update(self, job: str) -> None:
        if self._show():
            return
        with self._lock:
            row = self.rows[job]
            key = (row["step"], row["phase"])
            if key == row["printed"]:
                return
            row["printed"] = key
        self.console.print(self.line(job), highlight=False, soft_wrap=True)
