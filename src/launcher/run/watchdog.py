"""The run watchdog: findings about a run from its parsed step records and the wall clock (pure).

Fed what the log follower sees (`observe(records, now)` as steps arrive, `tick(phase, now)` once per
poll), it returns each *new* finding once:

- `stall`: no new step within `max(stall_min_s, stall_factor × median step time)` while the job is
  Running. The median is verl's own `timing_s/step` when the lines carry it (a follower that catches
  up on a long log receives many steps at once, so arrival gaps would say nothing), else the gaps
  between step arrivals. The clock starts at the first step each attempt logs, not at pod start:
  step 1 (and the first step after a restart) carries model loading, engine start-up and compilation,
  and a run that left Running (Restarting, Pending, Suspended) is not stalled, it is waiting.
- `reward_collapse`: `critic/score/mean` exactly 0 or exactly 1 for `collapse_steps` steps in a row
  (GSM8K's 0/1 rule reward: nothing left to learn from, every group is zero-signal).
- `entropy_collapse`: `actor/entropy` below `entropy_ratio` × its starting value (the median of the
  first three steps) for `collapse_steps` steps in a row.
- `clip_jump`: `response_length/clip_ratio` at least `clip_jump` above the median of the previous
  `CLIP_WINDOW` steps (responses suddenly hitting `data.max_response_length`).
- `nonfinite`: `actor/pg_loss` or `actor/grad_norm` is nan or ±inf.

And the spec's RL health rules (`health:`, `launcher.spec.model.HealthSpec`), each with its action (`warn`, or
`stop`: the follower deletes the job and exits 1), carried on the finding:

- `no_signal`: `critic/advantages/max` and `/min` both 0 (every group's rewards equal) for `steps` steps in a row.
- `clip_pinned`: `response_length/clip_ratio` at least `ratio` for `steps` steps in a row (off while `ratio` is null).
- `kl_drift`: |`actor/ppo_kl`| above `max` for `steps` steps in a row (off while `max` is null).
- `entropy_drift`: |`actor/entropy` / start - 1| above `max_change` for `steps` steps in a row, the start being the
  median of the first three steps (off while `max_change` is null).

Every finding has a `key` (kind plus what makes it distinct, e.g. the step a stall followed), and a
key is reported once: `Watchdog(seen=...)` takes the keys already written to `findings.jsonl`.
Rows are kept by step, the latest logging of a step winning (a restarted attempt re-logs steps), so
the step-sequence checks look at the run as `metrics.jsonl` holds it.

Never imports the Kubernetes client (ARCHITECTURE.md "Walls").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable

SCORE = "critic/score/mean"
ENTROPY = "actor/entropy"
CLIP = "response_length/clip_ratio"
STEP_TIME = "timing_s/step"
NONFINITE_KEYS = ("actor/pg_loss", "actor/grad_norm")
CLIP_WINDOW = 5  # steps whose median is the clip ratio's baseline
ENTROPY_BASELINE_STEPS = 3  # first steps whose median is entropy's starting value
EXACT = 1e-9  # a 0/1 reward's batch mean is exactly 0.0 or 1.0; this only absorbs float printing

ADV_MAX, ADV_MIN, KL = "critic/advantages/max", "critic/advantages/min", "actor/ppo_kl"
HEALTH_KINDS = ("no_signal", "clip_pinned", "kl_drift", "entropy_drift")
KINDS = ("stall", "reward_collapse", "entropy_collapse", "clip_jump", "nonfinite", *HEALTH_KINDS)


@dataclass(frozen=True)
class WatchdogConfig:
    """Thresholds (defaults documented in README "Watchdog"); `check` names a bad one."""

    stall_factor: float = 3.0  # K: a stall is no step within K × the median step time ...
    stall_min_s: float = 300.0  # ... and never less than this (seconds)
    collapse_steps: int = 5  # N: steps in a row for the reward and entropy collapses
    entropy_ratio: float = 0.1  # entropy below this fraction of its starting value
    clip_jump: float = 0.2  # clip ratio this far above its recent median

    def problems(self) -> list[str]:
        """What is wrong with these values, as `--flag: expected ..., got ...` lines (empty when fine)."""
        out = []
        if not (self.stall_factor > 0 and math.isfinite(self.stall_factor)):
            out.append(f"--stall-factor: expected a number > 0, got {self.stall_factor:g}")
        if not (self.stall_min_s >= 0 and math.isfinite(self.stall_min_s)):
            out.append(f"--stall-min: expected seconds >= 0, got {self.stall_min_s:g}")
        if self.collapse_steps < 2:
            out.append(f"--collapse-steps: expected an integer >= 2, got {self.collapse_steps}")
        if not 0 < self.entropy_ratio < 1:
            out.append(f"--entropy-ratio: expected a fraction between 0 and 1, got {self.entropy_ratio:g}")
        if not 0 < self.clip_jump <= 1:
            out.append(f"--clip-jump: expected a fraction in (0, 1], got {self.clip_jump:g}")
        return out


@dataclass(frozen=True)
class Finding:
    """One thing the watchdog noticed: what, at which step, a one-line message and the numbers behind it."""

    kind: str
    key: str
    step: int | None
    message: str
    evidence: dict = field(default_factory=dict)
    rule_action: str | None = None  # a health rule's action (warn, stop); None for the built-in checks

    def as_dict(self) -> dict:
        return asdict(self)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class Watchdog:
    """Stateful checks over one run (see the module docstring). Not thread-safe: the caller serialises."""

    def __init__(self, config: WatchdogConfig | None = None, *, seen: Iterable[str] = (), health=None,
                 attempt: int = 0):
        """`health`: the spec's `HealthSpec` (None: its defaults). `attempt`: restarts the watchdog's caller made so
        far (a stall's key names it, so a run that stalls after the same step again is reported again)."""
        from launcher.spec.model import HealthSpec

        self.config = config or WatchdogConfig()
        self.health = health if health is not None else HealthSpec()
        self.seen: set[str] = set(seen)
        self.rows: dict[int, dict] = {}
        self._durations: dict[int, float] = {}  # step -> seconds it took
        self._last_step: int | None = None  # newest step that arrived
        self._last_at: float | None = None  # when it arrived (the caller's clock)
        self._armed = False  # the stall clock runs (a step arrived in this Running stretch)
        self.attempt = attempt

    # inputs ------------------------------------------------------------------------------------

    def seed(self, rows: Iterable[dict], now: float) -> list[Finding]:
        """Rows already in `metrics.jsonl` (`{"step": N, ...}`), from before this watchdog started.

        They give the median and the history; the stall clock starts now, at the newest of them, so a
        run that hung before anyone watched is flagged one bound after watching began."""
        for row in rows:
            step = row.get("step")
            if isinstance(step, int):
                self._keep(step, {k: v for k, v in row.items() if k != "step"}, arrival_gap=None)
        if self.rows:
            self._last_step, self._last_at, self._armed = max(self.rows), now, True
        return self._sequence_findings()

    def observe(self, records: Iterable, now: float) -> list[Finding]:
        """Step records (`launcher.metrics.StepRecord`) as they arrive at time `now` (seconds, any epoch)."""
        new: list[Finding] = []
        for rec in records:
            if rec.step <= 0:  # step 0 is the validation before training: no training metrics, no timing
                continue
            gap = None if self._last_at is None else now - self._last_at
            self._keep(rec.step, dict(rec.metrics), arrival_gap=gap if self._armed else None)
            self._last_step, self._last_at, self._armed = rec.step, now, True
            new += self._nonfinite(rec.step, rec.metrics)
        return new + self._sequence_findings()

    def tick(self, phase: str, now: float) -> list[Finding]:
        """Once per poll: the job's phase (`launcher.kube.jobs.JobState.phase`) and the time."""
        if phase != "Running":
            self._armed = False  # waiting is not stalling; the clock restarts at the next step
            return []
        if not self._armed or self._last_at is None:
            return []
        bound = self.stall_bound()
        idle = now - self._last_at
        if idle <= bound:
            return []
        median = self.median_step_s()
        med = f"{median:.1f}s" if median is not None else "unknown"
        return self._new(Finding(
            "stall", f"stall@{self._last_step}" + (f"#{self.attempt}" if self.attempt else ""), self._last_step,
            f"no new step for {idle:.0f}s after step {self._last_step} (bound {bound:.0f}s = max("
            f"{self.config.stall_min_s:g}s, {self.config.stall_factor:g} × median step time {med}))",
            {"last_step": self._last_step, "idle_s": round(idle, 1), "bound_s": round(bound, 1),
             "median_step_s": None if median is None else round(median, 3),
             "stall_factor": self.config.stall_factor, "stall_min_s": self.config.stall_min_s}))

    def watched(self) -> dict:
        """What this watchdog has judged so far, for `watchdog.json`: the steps it holds (the first and last, and how
        many), each check with whether it is on and its threshold, and the keys it reported. A run with no finding
        is only shown healthy together with this: the steps were seen, with these checks on."""
        h = self.health
        checks = {
            "stall": {"on": True, "stall_factor": self.config.stall_factor, "stall_min_s": self.config.stall_min_s},
            "reward_collapse": {"on": True, "steps": self.config.collapse_steps},
            "entropy_collapse": {"on": True, "steps": self.config.collapse_steps,
                                 "entropy_ratio": self.config.entropy_ratio},
            "clip_jump": {"on": True, "clip_jump": self.config.clip_jump},
            "nonfinite": {"on": True, "keys": list(NONFINITE_KEYS)},
            "no_signal": {"on": True, "steps": h.no_signal.steps},
            "clip_pinned": {"on": h.clip_pinned.ratio is not None, "ratio": h.clip_pinned.ratio,
                            "steps": h.clip_pinned.steps},
            "kl_drift": {"on": h.kl_drift.max is not None, "max": h.kl_drift.max, "steps": h.kl_drift.steps},
            "entropy_drift": {"on": h.entropy_drift.max_change is not None, "max_change": h.entropy_drift.max_change,
                              "steps": h.entropy_drift.steps},
        }
        steps = sorted(self.rows)
        return {"steps_seen": len(steps), "first_step": steps[0] if steps else None,
                "last_step": steps[-1] if steps else None, "median_step_s": self.median_step_s(),
                "checks": checks, "reported": sorted(self.seen)}

    def restarted(self) -> None:
        """The caller ended the stuck attempt: the stall clock waits for the next attempt's first step."""
        self.attempt += 1
        self._armed = False

    # derived -----------------------------------------------------------------------------------

    def median_step_s(self) -> float | None:
        """Median step duration so far (seconds), None before any is known."""
        return statistics.median(self._durations.values()) if self._durations else None

    def stall_bound(self) -> float:
        """Seconds without a new step after which the run counts as stalled."""
        median = self.median_step_s()
        return max(self.config.stall_min_s, self.config.stall_factor * median if median is not None else 0.0)

    # internals ---------------------------------------------------------------------------------

    def _keep(self, step: int, metrics: dict, arrival_gap: float | None) -> None:
        self.rows[step] = metrics
        t = metrics.get(STEP_TIME)
        if _finite(t) and t > 0:
            self._durations[step] = float(t)
        elif arrival_gap is not None and arrival_gap > 0 and step not in self._durations:
            self._durations[step] = arrival_gap

    def _new(self, *findings: Finding) -> list[Finding]:
        out = []
        for f in findings:
            if f is not None and f.key not in self.seen:
                self.seen.add(f.key)
                out.append(f)
        return out

    def _nonfinite(self, step: int, metrics: dict) -> list[Finding]:
        out = []
        for key in NONFINITE_KEYS:
            v = metrics.get(key)
            if isinstance(v, float) and not math.isfinite(v):
                out += self._new(Finding("nonfinite", f"nonfinite:{key}", step, f"step {step}: {key} = {v!r}",
                                         {"metric": key, "value": repr(v), "step": step}))
        return out

    def _series(self, key: str) -> list[tuple[int, float]]:
        return [(s, float(m[key])) for s, m in sorted(self.rows.items()) if _finite(m.get(key))]

    def _sequence_findings(self) -> list[Finding]:
        out: list[Finding] = []
        for step in sorted(self.rows):  # nonfinite values also in seeded rows (observe checks live ones)
            out += self._nonfinite(step, self.rows[step])
        out += self._new(self._reward_collapse(), self._entropy_collapse(), self._clip_jump(), *self._health())
        return out

    def _health(self) -> list[Finding | None]:
        h = self.health
        zero = lambda m: abs(m[ADV_MAX]) <= EXACT and abs(m[ADV_MIN]) <= EXACT  # noqa: E731
        both = [(s, m) for s, m in sorted(self.rows.items()) if _finite(m.get(ADV_MAX)) and _finite(m.get(ADV_MIN))]
        out = [self._streak("no_signal", h.no_signal, [(s, zero(m), 0.0) for s, m in both],
                            "critic/advantages/max = min = 0: every group's rewards are equal, nothing is learned")]
        if h.clip_pinned.ratio is not None:
            out.append(self._streak("clip_pinned", h.clip_pinned,
                                    [(s, v >= h.clip_pinned.ratio, v) for s, v in self._series(CLIP)],
                                    f"{CLIP} at or above {h.clip_pinned.ratio:g}: responses are cut at "
                                    "data.max_response_length"))
        if h.kl_drift.max is not None:
            out.append(self._streak("kl_drift", h.kl_drift, [(s, abs(v) > h.kl_drift.max, v) for s, v in self._series(KL)],
                                    f"|{KL}| above {h.kl_drift.max:g}: the policy is moving away from the rollouts'"))
        series = self._series(ENTROPY)
        if h.entropy_drift.max_change is not None and len(series) > ENTROPY_BASELINE_STEPS:
            start = statistics.median(v for _, v in series[:ENTROPY_BASELINE_STEPS])
            if start > 0:
                out.append(self._streak(
                    "entropy_drift", h.entropy_drift,
                    [(s, abs(v / start - 1) > h.entropy_drift.max_change, v) for s, v in series[ENTROPY_BASELINE_STEPS:]],
                    f"{ENTROPY} more than {h.entropy_drift.max_change:g} × its start ({start:.4g}) away from it"))
        return out

    @staticmethod
    def _streak(kind: str, rule, marks: list[tuple[int, bool, float]], what: str) -> Finding | None:
        """The first run of `rule.steps` consecutive steps whose mark is true (one finding per rule and run)."""
        run: list[tuple[int, float]] = []
        for s, bad, v in marks:
            if not bad:
                run = []
            else:  # a step missing from the series (no metric logged) breaks the run
                run = [*run, (s, v)] if run and s == run[-1][0] + 1 else [(s, v)]
            if len(run) >= rule.steps:
                steps = [x[0] for x in run[:rule.steps]]
                return Finding(kind, kind, steps[-1],
                               f"health rule {kind} ({rule.action}): {what}, {rule.steps} step(s) in a row "
                               f"({steps[0]}-{steps[-1]})", {"steps": steps, "values": [x[1] for x in run[:rule.steps]]},
                               rule_action=rule.action)
        return None

    def _reward_collapse(self) -> Finding | None:
        n = self.config.collapse_steps
        series = self._series(SCORE)
        run: list[int] = []
        level = None
        for s, v in series:
            here = 0 if abs(v) <= EXACT else 1 if abs(v - 1.0) <= EXACT else None
            if here is None or here != level:
                run = []
            level = here
            if here is None:
                continue
            run.append(s)
            if len(run) >= n:
                return Finding("reward_collapse", f"reward_collapse@{here}", run[-1],
                               f"{SCORE} stuck at {here} for {n} steps ({run[0]}-{run[-1]}): every sample "
                               f"scored {here}, so GRPO's advantages are zero and nothing is learned",
                               {"metric": SCORE, "value": here, "steps": list(run)})
        return None

    def _entropy_collapse(self) -> Finding | None:
        n = self.config.collapse_steps
        series = self._series(ENTROPY)
        if len(series) < ENTROPY_BASELINE_STEPS + n:
            return None
        start = statistics.median(v for _, v in series[:ENTROPY_BASELINE_STEPS])
        if start <= 0:
            return None
        limit = self.config.entropy_ratio * start
        run: list[tuple[int, float]] = []
        for s, v in series[ENTROPY_BASELINE_STEPS:]:
            run = run + [(s, v)] if v < limit else []
            if len(run) >= n:
                return Finding("entropy_collapse", "entropy_collapse", run[n - 1][0],
                               f"{ENTROPY} below {self.config.entropy_ratio:g} × its starting value "
                               f"({start:.4g}) for {n} steps ({run[0][0]}-{run[n - 1][0]}): latest {run[n - 1][1]:.4g}",
                               {"metric": ENTROPY, "start": start, "limit": limit,
                                "steps": [x[0] for x in run[:n]], "values": [x[1] for x in run[:n]]})
        return None

    def _clip_jump(self) -> Finding | None:
        series = self._series(CLIP)
        for i in range(3, len(series)):
            window = [v for _, v in series[max(0, i - CLIP_WINDOW):i]]
            base = statistics.median(window)
            s, v = series[i]
            if v - base >= self.config.clip_jump:
                return Finding("clip_jump", "clip_jump", s,
                               f"step {s}: {CLIP} jumped to {v:.3g} from a median of {base:.3g} over the "
                               f"previous {len(window)} steps: responses are hitting data.max_response_length",
                               {"metric": CLIP, "value": v, "baseline": base, "window": len(window),
                                "jump": self.config.clip_jump})
        return None
