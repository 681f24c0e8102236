"""The live display of a followed run: step/total, elapsed, ETA, latest reward and throughput.

Rendered with rich on stderr so stdout carries only log lines (pipe-friendly). On a terminal it is a
live panel under the scrolling log; elsewhere (CI, pipes) it prints one status line per new step.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

REWARD_KEY = "critic/score/mean"
THROUGHPUT_KEY = "perf/throughput"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(max(seconds, 0))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


class RunProgress:
    """Tracks steps and job phase; `render()` gives the one-line summary the display shows."""

    def __init__(self, job: str, total_steps: int | None, *, console: Console | None = None,
                 clock=time.monotonic):
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

    # updates ---------------------------------------------------------------------------------

    def records(self, recs) -> None:
        for r in recs:
            if r.step == 0:
                continue  # step 0 is validation before training, not progress
            if self.first_step_at is None:
                self.first_step_at, self.first_step = self.clock(), r.step
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

    def __enter__(self) -> RunProgress:
        if self.console.is_terminal:
            self._live = Live(Text(self.render()), console=self.console, refresh_per_second=4, transient=False,
                              redirect_stdout=True, redirect_stderr=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(Text(self.render()))
            self._live.__exit__(*exc)
            self._live = None
        else:
            self.console.print(self.render(), highlight=False, soft_wrap=True)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(Text(self.render()))
        elif self.step is not None and self.step != self._last_printed_step:
            self._last_printed_step = self.step
            self.console.print(self.render(), highlight=False, soft_wrap=True)


def print_line(pod: str, line: str, stream=None) -> None:
    """`[master-0] text` on stdout (flushed: a follower's output is read live)."""
    out = stream or sys.stdout
    out.write(f"[{pod}] {line}\n")
    out.flush()
