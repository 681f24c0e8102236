"""The one live view of a followed sweep: a row per run (its axis values, phase, step/total, latest score, elapsed).

On a terminal it is a rich live table on stderr with notices printed above it; elsewhere (CI, pipes) it prints one
line per run per new step or phase change, so a log of the sweep stays readable. Callbacks come from every run's
follower thread: they only update state under a lock, and the display is redrawn from that state.
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from launcher.progress import REWARD_KEY, _clock


class SweepView:
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

    def tick(self) -> None:
        if self._live is not None:
            self._live.update(self.table())

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
        if self._live is not None:
            self._live.update(self.table())
            return
        with self._lock:
            row = self.rows[job]
            key = (row["step"], row["phase"])
            if key == row["printed"]:
                return
            row["printed"] = key
        self.console.print(self.line(job), highlight=False, soft_wrap=True)

    def __enter__(self) -> SweepView:
        if self.console.is_terminal:
            self._live = Live(self.table(), console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self.table())
            self._live.__exit__(*exc)
            self._live = None
