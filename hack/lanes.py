#!/usr/bin/env python3
"""Run named build lanes at once; each lane's output goes to its own log file, the console shows progress.

Usage: hack/lanes.py PHASE NAME=COMMAND [NAME=COMMAND ...]

`make run`'s builds (hack/run-main-job.sh) and `make test`'s installs (Makefile) call it. A cold build prints
about a thousand `go: downloading` lines and the image build's output; interleaved by make, that told a new user
nothing for 14 minutes and then everything at once. Here each lane (one `bash -c COMMAND`) writes to
`$GRPO_CACHE/logs/<PHASE>-<time>/<NAME>.log`, named on the console at the start, and the console shows:

- on a terminal: one line per lane, redrawn every second: its state, elapsed time, "~N min left" from that lane's
  last measured build (`$GRPO_CACHE/lane-times.json`), and the log's last meaningful line;
- otherwise (CI, a pipe): a plain line per running lane after 1, 3, 7, 12 min and every 5 min after that, and a
  line as each lane ends: CI's log stays short.

The first lane to fail has its whole log printed (the user's only evidence), the other lanes are stopped (their
process groups killed) and the runner exits with the failed lane's exit code. When every lane succeeds each one's
time is printed and recorded for the next estimate. With GRPO_TIMINGS_FILE set, one JSON line per lane is appended
to it: {"phase", "lane", "seconds", "rc"} (CI's end-of-run time table). Ctrl-C / SIGTERM stop the lanes cleanly.

Standard library only: it runs before the project's venv can be relied on.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

POLL_S = 0.2            # how often lanes are checked (a failure stops the others within this)
REDRAW_S = 1.0          # terminal: redraw period
# Not a terminal: one line per running lane after 60 s, the gap doubling up to 5 min (CI's log stays short even for
# a 48-minute cold build under load: about a dozen lines per lane).
PLAIN_FIRST_S, PLAIN_MAX_S = 60.0, 300.0
NOOP_S = 30.0           # a success this short built nothing (a no-op over the cache): not a time to estimate from
STOP_GRACE_S = 10.0     # SIGTERM, then SIGKILL after this
KEEP_LOG_DIRS = 10      # per phase: a cold build's logs are a few MB each
TAIL_BYTES = 16384      # how much of a log's end is read for its last meaningful line
# Lines that say nothing about what a lane is doing now (Go's module fetches come by the hundred).
NOISE = re.compile(r"^\s*$|^go: (downloading|added|finding|extracting|upgraded) ")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# The signal that asked the runner to stop (SIGINT, SIGTERM, SIGHUP), or 0. A flag the loop reads, not an exception
# raised wherever the signal lands: stopping the lanes must not itself be interrupted half-way.
INTERRUPTED = 0


def _interrupted(signum: int, _frame) -> None:
    global INTERRUPTED
    INTERRUPTED = INTERRUPTED or signum


@dataclass
class Lane:
    name: str
    command: str
    log: Path
    estimate: float | None          # seconds of this lane's last measured build
    proc: subprocess.Popen | None = None
    start: float = 0.0
    end: float | None = None
    rc: int | None = None
    stopped: bool = False           # ended by this runner, not by itself

    def elapsed(self, now: float | None = None) -> float:
        end = self.end if self.end is not None else time.monotonic() if now is None else now
        return end - self.start


def duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def remaining(elapsed: float, estimate: float | None) -> str:
    """The rough time left, from the last measured build of the same lane."""
    if estimate is None:
        return "first build, no estimate"
    left = estimate - elapsed
    if left <= 0:
        return f"past the last build's {duration(estimate)}"
    return f"~{math.ceil(left / 60)} min left"


def last_line(log: Path) -> str:
    """The last meaningful line of a log (progress bars' carriage returns and colours removed), or ''."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    for line in reversed(re.split(r"[\r\n]", text)):
        line = ANSI.sub("", line).strip()
        if not NOISE.search(line):
            return line
    return ""


def exit_code(rc: int) -> int:
    """A shell's exit code for a Popen return code (negative: killed by that signal)."""
    return 128 - rc if rc < 0 else rc


def load_times(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
        return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}  # missing or damaged: no estimate is better than no build


def save_times(path: Path, times: dict[str, float]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a run killed mid-write leaves the previous times


def new_log_dir(cache: Path, phase: str) -> Path:
    """A fresh `<cache>/logs/<phase>-<time>/`, after removing all but the newest KEEP_LOG_DIRS - 1 of this phase."""
    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    old = sorted(p for p in logs.glob(f"{phase}-*") if p.is_dir())
    for p in old[:max(0, len(old) - (KEEP_LOG_DIRS - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    stamp, n = time.strftime("%Y%m%d-%H%M%S"), 1
    while True:
        d = logs / (f"{phase}-{stamp}" if n == 1 else f"{phase}-{stamp}-{n}")
        try:
            d.mkdir()
            return d
        except FileExistsError:
            n += 1


class Runner:
    def __init__(self, phase: str, lanes: list[Lane], out: TextIO, tty: bool):
        self.phase, self.lanes, self.out, self.tty = phase, lanes, out, tty
        self.drawn = 0  # terminal: how many lane lines the last redraw wrote (to move back over them)

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def start(self) -> None:
        for lane in self.lanes:
            with lane.log.open("wb") as log:
                # A session of its own: the whole lane (make and what it runs) is one process group to stop, and
                # the terminal's Ctrl-C reaches this runner only, which stops the lanes itself. No stdin: a prompt
                # nobody can see would hang the lane.
                lane.proc = subprocess.Popen(["bash", "-c", lane.command], stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            lane.start = time.monotonic()

    def poll(self) -> Lane | None:
        """Note the lanes that ended; the first failed one, if any."""
        failed = None
        for lane in self.lanes:
            if lane.rc is None and lane.proc is not None and (rc := lane.proc.poll()) is not None:
                lane.end, lane.rc = time.monotonic(), rc
                if not self.tty:
                    self.say(self.plain(lane, lane.end))
                if rc != 0 and failed is None:
                    failed = lane
        return failed

    def stop(self) -> list[Lane]:
        """SIGTERM every running lane's process group, SIGKILL what is left after the grace period."""
        running = [lane for lane in self.lanes if lane.rc is None and lane.proc is not None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for lane in running:
                try:
                    os.killpg(lane.proc.pid, sig)
                except ProcessLookupError:
                    pass  # the group is gone already
            deadline = time.monotonic() + STOP_GRACE_S
            for lane in running:
                try:
                    lane.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for lane in running:
            lane.end, lane.rc, lane.stopped = time.monotonic(), lane.proc.wait(), True
        return running

    def state(self, lane: Lane, now: float) -> str:
        if lane.rc is None:
            return f"{duration(lane.elapsed(now))}, {remaining(lane.elapsed(now), lane.estimate)}"
        if lane.rc == 0:
            return f"ok in {duration(lane.elapsed(now))}"
        if lane.stopped:
            return f"stopped after {duration(lane.elapsed(now))}"
        return f"FAILED (exit {exit_code(lane.rc)}) after {duration(lane.elapsed(now))}"

    def plain(self, lane: Lane, now: float) -> str:
        activity = f": {last_line(lane.log)[:120]}" if lane.rc is None else ""
        return f"[{self.phase} {time.strftime('%H:%M:%S')}] {lane.name}: {self.state(lane, now)}{activity}"

    def redraw(self, now: float) -> None:
        """Rewrite the block of lane lines in place, each cut to the terminal's width (a wrapped line would
        break the cursor arithmetic)."""
        width = max(20, shutil.get_terminal_size().columns - 1)
        pad = max(len(lane.name) for lane in self.lanes)
        buf = f"\x1b[{self.drawn}A\r" if self.drawn else ""
        for lane in self.lanes:
            line = f"  {lane.name:<{pad}}  {self.state(lane, now)}"
            if lane.rc is None and (activity := last_line(lane.log)):
                line += f"  | {activity}"
            buf += "\x1b[2K" + (line if len(line) <= width else line[:width - 1] + "…") + "\n"
        self.out.write(buf)
        self.out.flush()
        self.drawn = len(self.lanes)

    def print_log(self, lane: Lane) -> None:
        self.say(f"----- {lane.name}: its whole log ({lane.log}) -----")
        self.out.write(lane.log.read_bytes().decode("utf-8", "replace"))
        self.say(f"----- end of {lane.name}'s log -----")


def run_lanes(phase: str, specs: list[tuple[str, str]], *, cache: Path, out: TextIO, tty: bool,
              timings_file: str | None = None, noop_s: float = NOOP_S) -> int:
    """Run the lanes; return 0, the failed lane's exit code, or 128 + the signal that interrupted."""
    times_path = cache / "lane-times.json"
    times = load_times(times_path)
    log_dir = new_log_dir(cache, phase)
    lanes = [Lane(name, cmd, log_dir / f"{name}.log", times.get(name)) for name, cmd in specs]
    r = Runner(phase, lanes, out, tty)
    r.say(f"== {phase}: {len(lanes)} lane(s) at once: {', '.join(lane.name for lane in lanes)}; "
          f"their output goes to {log_dir}/<lane>.log (a failed lane's log is printed in full)")
    r.say("   last measured builds: " + ", ".join(
        f"{lane.name} {duration(lane.estimate) if lane.estimate else 'none (no estimate)'}" for lane in lanes))
    failed, stopped = None, []
    try:
        r.start()
        last_redraw = last_plain = time.monotonic()
        plain_gap = PLAIN_FIRST_S
        while failed is None and not INTERRUPTED and any(lane.rc is None for lane in lanes):
            time.sleep(POLL_S)
            failed = r.poll()
            now = time.monotonic()
            if tty and now - last_redraw >= REDRAW_S:
                r.redraw(now)
                last_redraw = now
            elif not tty and now - last_plain >= plain_gap:
                for lane in lanes:
                    if lane.rc is None:
                        r.say(r.plain(lane, now))
                last_plain, plain_gap = now, min(PLAIN_MAX_S, plain_gap * 2)
    finally:
        stopped = r.stop()  # whatever ended the loop (an exception too), no lane outlives the runner
    if tty:
        r.redraw(time.monotonic())
    names = ", ".join(lane.name for lane in stopped) or "none"
    if INTERRUPTED:
        r.say(f"== {phase}: interrupted ({signal.Signals(INTERRUPTED).name}); lanes stopped: {names}; "
              f"logs in {log_dir}")
        rc = 128 + INTERRUPTED
    elif failed is not None:
        r.print_log(failed)
        rc = exit_code(failed.rc)
        r.say(f"== {phase}: lane {failed.name} FAILED (exit {rc}) after {duration(failed.elapsed())}; "
              f"lanes stopped: {names}; its log: {failed.log}")
    else:
        rc = 0
        r.say(f"== {phase}: done in {duration(max(lane.elapsed() for lane in lanes))}: "
              + ", ".join(f"{lane.name} {duration(lane.elapsed())}" for lane in lanes) + f" (logs in {log_dir})")
        built = {lane.name: round(lane.elapsed(), 1) for lane in lanes if lane.elapsed() >= noop_s}
        if built:
            save_times(times_path, {**load_times(times_path), **built})
    if timings_file:
        with open(timings_file, "a") as f:
            for lane in lanes:
                if lane.rc is not None:
                    f.write(json.dumps({"phase": phase, "lane": lane.name, "seconds": round(lane.elapsed(), 3),
                                        "rc": exit_code(lane.rc)}) + "\n")
    return rc


def parse(argv: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """PHASE NAME=COMMAND ... -> (phase, [(name, command), ...]); exit 2 on anything else."""
    specs = [tuple(a.split("=", 1)) for a in argv[1:]]
    names = [n for n, *_ in specs]
    if len(argv) < 2 or any(len(s) != 2 for s in specs) or len(set(names)) != len(names) \
            or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in [argv[0], *names]):
        print(f"usage: lanes.py PHASE NAME=COMMAND [NAME=COMMAND ...] (distinct names: letters, digits, . _ -); "
              f"got {argv}", file=sys.stderr)
        raise SystemExit(2)
    return argv[0], specs  # type: ignore[return-value]


def main(argv: list[str]) -> int:
    phase, specs = parse(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupted)
    cache = Path(os.environ.get("GRPO_CACHE") or Path.home() / ".cache" / "grpo-launcher")
    rc = run_lanes(phase, specs, cache=cache, out=sys.stdout, tty=sys.stdout.isatty(),
                   timings_file=os.environ.get("GRPO_TIMINGS_FILE") or None)
    if INTERRUPTED:  # die of the same signal, lanes stopped: the calling shell or make then stops too
        signal.signal(INTERRUPTED, signal.SIG_DFL)
        os.kill(os.getpid(), INTERRUPTED)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
