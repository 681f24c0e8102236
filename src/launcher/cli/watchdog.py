"""The watchdog while following (`submit -f`, `logs -f`, `watch`): its flags, findings output and the stall action.

`WatchSession` sits between the log follower and `launcher.run.watchdog.Watchdog`: the follower's record
callback (pod threads) and status callback (its main loop, once per poll) feed it; each new finding
is printed once, appended to `runs/<job>/findings.jsonl`, and a stall with `--on-stall delete`
deletes the job (its PersistentVolumeClaim, which holds the checkpoints, is kept), which ends the
follow; the verb then exits 1 with the reason.
"""

from __future__ import annotations

import argparse
import json
import threading
import time


def add_watchdog_arguments(parser: argparse.ArgumentParser, *, optional: bool = True) -> None:
    """Thresholds and `--on-stall`; `optional` adds `--no-watchdog` (for verbs where it is a side feature)."""
    from launcher.run.watchdog import WatchdogConfig

    d = WatchdogConfig()
    g = parser.add_argument_group("watchdog (while following; findings go to runs/<job>/findings.jsonl)")
    if optional:
        g.add_argument("--no-watchdog", action="store_true", help="do not watch for stalls and collapses")
    g.add_argument("--on-stall", choices=["report", "delete"], default="report",
                   help="what a stall does: report it (default) or delete the job to free its GPUs (exit 1; "
                        "the PVC with the checkpoints is kept)")
    g.add_argument("--stall-factor", type=float, default=d.stall_factor, metavar="K",
                   help=f"stalled: no new step within K x the median step time (default {d.stall_factor:g})")
    g.add_argument("--stall-min", type=float, default=d.stall_min_s, metavar="SECONDS",
                   help=f"...and never within less than this (default {d.stall_min_s:g})")
    g.add_argument("--collapse-steps", type=int, default=d.collapse_steps, metavar="N",
                   help=f"reward/entropy collapse: that many steps in a row (default {d.collapse_steps})")
    g.add_argument("--entropy-ratio", type=float, default=d.entropy_ratio, metavar="R",
                   help=f"entropy collapse: actor/entropy below R x its starting value (default {d.entropy_ratio:g})")
    g.add_argument("--clip-jump", type=float, default=d.clip_jump, metavar="DELTA",
                   help="clip ratio jump: response_length/clip_ratio DELTA above its recent median "
                        f"(default {d.clip_jump:g})")


def config_from_args(args: argparse.Namespace):
    """The `WatchdogConfig` for these flags, or None with `--no-watchdog`; BadInput (exit 2) naming a bad flag."""
    from launcher.errors import BadInput
    from launcher.run.watchdog import WatchdogConfig

    if getattr(args, "no_watchdog", False):
        return None
    cfg = WatchdogConfig(stall_factor=args.stall_factor, stall_min_s=args.stall_min,
                         collapse_steps=args.collapse_steps, entropy_ratio=args.entropy_ratio,
                         clip_jump=args.clip_jump)
    problems = cfg.problems()
    if problems:
        raise BadInput("; ".join(problems))
    return cfg


def _json_lines(path) -> list:
    """The values of a JSON-lines file (unreadable lines skipped; [] when the file cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def load_findings(path) -> list[dict]:
    """The findings already in `findings.jsonl` (unreadable lines skipped)."""
    return [obj for obj in _json_lines(path) if isinstance(obj, dict)]


def format_finding(f) -> str:
    return f"watchdog: {f.kind}: {f.message}"


class WatchSession:
    """One run's watchdog while it is followed (thread-safe: pod threads and the main loop call in)."""

    def __init__(self, kube, ref, run_dir, config, *, on_stall: str = "report", emit=None, clock=time.monotonic,
                 health=None):
        from launcher.metrics import JSONL
        from launcher.run.watchdog import Watchdog

        self.kube, self.ref, self.run_dir = kube, ref, run_dir
        self.on_stall = on_stall
        self.emit = emit or (lambda f: None)
        self.clock = clock
        self.lock = threading.Lock()
        self._handle_lock = threading.RLock()
        self.deleted_reason: str | None = None
        self.deleted_by: str | None = None  # what deleted the run: --on-stall delete, or a health rule's stop
        self.findings: list = []
        seen = [f.get("key") for f in load_findings(run_dir.findings)]
        self.dog = Watchdog(config, seen=[k for k in seen if k], health=health)
        self._handle(self.dog.seed(_json_lines(run_dir.path / JSONL), self.clock()))

    # follower callbacks -------------------------------------------------------------------------

    def records(self, recs) -> None:
        with self.lock:
            found = self.dog.observe(recs, self.clock())
        self._handle(found)

    def status(self, state, pods) -> None:
        with self.lock:
            found = self.dog.tick(state.phase, self.clock())
        self._handle(found)

    # ------------------------------------------------------------------------------------------

    def _handle(self, found) -> None:
        with self._handle_lock:  # pod threads and the main loop: one writer of findings.jsonl at a time
            for f in found:
                self._one(f)

    def _one(self, f) -> None:
        stops = (f.kind == "stall" and self.on_stall == "delete") or f.rule_action == "stop"  # a health rule's own
        action = "delete" if stops and self.deleted_reason is None else None
        row = {**f.as_dict(), "job": self.ref.name, "time": _now_rfc3339(), "action": action}
        with open(self.run_dir.findings, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        self.findings.append(f)
        self.emit(f)
        if action == "delete":
            self._delete(f)

    def _delete(self, f) -> None:
        from launcher.cli.cluster import err
        from launcher.cli.commands.delete import delete_run

        stall = f.kind == "stall"
        err(f"watchdog: {'--on-stall delete' if stall else f'health rule {f.kind} (stop)'}: deleting "
            f"{self.ref.resource.kind} {self.ref.name} to free its GPUs (the PersistentVolumeClaim with the "
            "checkpoints is kept)")
        delete_run(self.kube, self.ref, keep_pvc=True, on_deleted=lambda m: err(f"watchdog: {m}"))
        self.deleted_by = "--on-stall delete" if stall else "a health rule's stop"
        self.deleted_reason = f"stalled: {f.message}" if stall else f.message


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def session_for(args: argparse.Namespace, kube, ref, run_dir, *, emit=None):
    """A `WatchSession` for a following verb's flags (None with `--no-watchdog`); findings go to stderr by default."""
    from launcher.cli.cluster import err

    from launcher.spec.model import HealthSpec

    cfg = config_from_args(args)
    if cfg is None:
        return None
    # the run's own health rules, as its spec.yaml was saved (a run from before them: their defaults)
    health = HealthSpec.model_validate(run_dir.saved_spec().get("health") or {})
    return WatchSession(kube, ref, run_dir, cfg, on_stall=args.on_stall, health=health,
                        emit=emit or (lambda f: err(format_finding(f))))


def deleted_exit(session) -> int | None:
    """1 (with the reason on stderr) when the session deleted the run (a stall, a health rule's stop), else None."""
    from launcher.cli.cluster import err
    from launcher.errors import EXIT_RUN_FAILED

    if session is None or session.deleted_reason is None:
        return None
    err(f"run deleted by the watchdog ({session.deleted_by}): {session.deleted_reason}")
    return EXIT_RUN_FAILED
