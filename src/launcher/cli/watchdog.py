"""The watchdog while following (`submit -f`, `logs -f`, `watch`): its flags, findings output and the stall action.

`WatchSession` sits between the log follower and `launcher.run.watchdog.Watchdog`: the follower's record
callback (pod threads) and status callback (its main loop, once per poll) feed it; each new finding
is printed once and appended to `runs/<job>/findings.jsonl`. A stall first captures an incident
(`launcher.cli.incident`: every process's stacks, the verdict of what hung, the pods' last lines),
then acts as `--on-stall` (or the spec's `health.stall.action`) says: `report`; `delete` deletes the
job (its PersistentVolumeClaim, which holds the checkpoints, is kept), which ends the follow and the
verb exits 1 with the reason; `restart` deletes the stuck attempt's pods so the operator starts them
again and the run resumes from its newest checkpoint, at most `max_restarts` times per run (counted
from the incidents on disk, so a re-attached follower keeps the count), then gives up as `delete`
does, naming each incident.
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
    g.add_argument("--on-stall", choices=["report", "delete", "restart"], default=None,
                   help="what a stall does after capturing an incident (runs/<job>/incidents/): report it, delete "
                        "the job to free its GPUs (exit 1; the PVC with the checkpoints is kept), or restart the stuck "
                        "attempt so it resumes from its newest checkpoint (PyTorchJob; at most --max-restarts times, "
                        "then delete, exit 1). Default: the spec's health.stall.action (report)")
    g.add_argument("--max-restarts", type=int, default=None, metavar="N",
                   help="--on-stall restart: restarts per run before giving up (default: health.stall.max_restarts, 2)")
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


def check_flags(args: argparse.Namespace, spec) -> None:
    """The watchdog flags of a verb that submits `spec` (submit, relaunch): BadInput (exit 2) before any cluster call."""
    config_from_args(args)
    if args.follow or args.logs:
        from launcher.render.manifests import pytorchjob_restart_policy

        stall_policy(args, spec.health, spec.backend, [pytorchjob_restart_policy(spec)])


def json_lines(path) -> list:
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
    return [obj for obj in json_lines(path) if isinstance(obj, dict)]


def format_finding(f) -> str:
    return f"watchdog: {f.kind}: {f.message}"


class WatchSession:
    """One run's watchdog while it is followed (thread-safe: pod threads and the main loop call in)."""

    def __init__(self, kube, ref, run_dir, config, *, on_stall: str = "report", max_restarts: int = 0, emit=None,
                 clock=time.monotonic, health=None, capture=None):
        """`capture`: the incident capture (`launcher.cli.incident.capture_incident`; tests pass their own)."""
        from launcher.metrics import JSONL
        from launcher.run.incidents import load_incidents
        from launcher.run.watchdog import Watchdog

        self.kube, self.ref, self.run_dir = kube, ref, run_dir
        self.on_stall, self.max_restarts = on_stall, max_restarts
        self.emit = emit or (lambda f: None)
        self.clock = clock
        self.lock = threading.Lock()
        self._handle_lock = threading.RLock()
        self.deleted_reason: str | None = None
        self.deleted_by: str | None = None  # what deleted the run: --on-stall delete/restart, or a health rule's stop
        self.findings: list = []
        self.incidents = load_incidents(run_dir.path)
        self.restarts = sum(1 for i in self.incidents if i.get("action") == "restart")
        if capture is None:
            from launcher.cli.incident import capture_incident as capture
        self._capture = capture
        seen = [f.get("key") for f in load_findings(run_dir.findings)]
        self.dog = Watchdog(config, seen=[k for k in seen if k], health=health, attempt=self.restarts)
        self._handle(self.dog.seed(json_lines(run_dir.path / JSONL), self.clock()))

    # follower callbacks -------------------------------------------------------------------------

    def records(self, recs) -> None:
        from launcher.run.dirs import write_atomic

        with self.lock:
            found = self.dog.observe(recs, self.clock())
            # after every batch of steps (a few per minute): a follower killed mid-run leaves what it had judged
            write_atomic(self.run_dir.watched, json.dumps(self.dog.watched(), indent=1, sort_keys=True))
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

    def _stall_action(self) -> str:
        if self.on_stall == "restart":
            return "restart" if self.restarts < self.max_restarts else "give_up"
        return self.on_stall

    def _one(self, f) -> None:
        incident = None
        if f.kind == "stall" and self.deleted_reason is None:
            action = self._stall_action()
            incident = self._incident(f, action)
        elif f.rule_action == "stop" and self.deleted_reason is None:  # a health rule's own
            action = "delete"
        else:
            action = None
        row = {**f.as_dict(), "job": self.ref.name, "time": _now_rfc3339(),
               "action": {"delete": "delete", "give_up": "delete", "restart": "restart"}.get(action)}
        if incident is not None:
            row["incident"] = incident["id"]
        with open(self.run_dir.findings, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        self.findings.append(f)
        self.emit(f)
        if action == "restart":
            self._restart()
        elif action in ("delete", "give_up"):
            self._delete(f, action)

    def _incident(self, f, action: str) -> dict:
        from launcher.cli.cluster import err

        err("watchdog: capturing an incident (stacks of every process, the pods' last lines) ...")
        inc = self._capture(self.kube, self.ref, self.run_dir, f, action=action, restarts=self.restarts,
                            budget=self.max_restarts if self.on_stall == "restart" else None)
        self.incidents.append(inc)
        verdict = inc.get("verdict") or {}
        err(f"watchdog: incident {inc['path']}: {verdict.get('class', 'unknown')} ({verdict.get('why', '')})")
        for frame in (verdict.get("frames") or [])[:4]:
            err(f"watchdog:   {frame}")
        return inc

    def _restart(self) -> None:
        from launcher.cli.cluster import err
        from launcher.kube import jobs as J
        from launcher.kube.client import POD

        self.restarts += 1
        pods = [p["metadata"]["name"] for p in J.job_pods(self.kube, self.ref)]
        err(f"watchdog: --on-stall restart ({self.restarts}/{self.max_restarts}): deleting the stuck attempt's pods "
            f"({', '.join(pods) or 'none left'}); the operator starts them again and the run resumes from its newest "
            "checkpoint")
        for name in pods:
            self.kube.delete(POD, name)
        with self.lock:
            self.dog.restarted()

    def _delete(self, f, action: str) -> None:
        from launcher.cli.cluster import err
        from launcher.cli.commands.delete import delete_run

        if f.kind == "stall":
            by = "--on-stall restart, budget spent" if action == "give_up" else "--on-stall delete"
        else:
            by = "a health rule's stop"
        err(f"watchdog: {by}: deleting {self.ref.resource.kind} {self.ref.name} to free its GPUs (the "
            "PersistentVolumeClaim with the checkpoints is kept)")
        delete_run(self.kube, self.ref, keep_pvc=True, on_deleted=lambda m: err(f"watchdog: {m}"))
        self.deleted_by = by
        if action == "give_up":
            named = ", ".join(f"{i['path']} ({(i.get('verdict') or {}).get('class', 'unknown')})"
                              for i in self.incidents)
            self.deleted_reason = (f"stalled {len(self.incidents)} time(s), gave up after {self.restarts} restart(s) "
                                   f"(max {self.max_restarts}): incidents {named}")
        elif f.kind == "stall":
            inc = self.incidents[-1] if self.incidents else None
            self.deleted_reason = f"stalled: {f.message}" + (f" (incident {inc['path']})" if inc else "")
        else:
            self.deleted_reason = f.message


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
    replicas = ((ref.obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}).values()
    on_stall, max_restarts = stall_policy(args, health, ref.backend,
                                          [r.get("restartPolicy") for r in replicas if isinstance(r, dict)])
    return WatchSession(kube, ref, run_dir, cfg, on_stall=on_stall, max_restarts=max_restarts, health=health,
                        emit=emit or (lambda f: err(format_finding(f))))


def stall_policy(args: argparse.Namespace, health, backend: str, restart_policies: list[str]) -> tuple[str, int]:
    """(action, max restarts) of `--on-stall`/`--max-restarts` over the spec's `health.stall`; BadInput (exit 2) for
    restart where deleted pods would not be started again to resume (`spec.rules`). `restart_policies`: the
    PyTorchJob replicas' restart policies."""
    from launcher.errors import BadInput
    from launcher.spec.rules import STALL_RESTART_BACKOFF, STALL_RESTART_EXPECTED

    action = args.on_stall or health.stall.action
    max_restarts = health.stall.max_restarts if args.max_restarts is None else args.max_restarts
    if args.max_restarts is not None and args.max_restarts < 0:
        raise BadInput(f"--max-restarts: expected an integer >= 0, got {args.max_restarts}")
    if action == "restart" and backend != "pytorchjob":
        raise BadInput(f"--on-stall: expected {STALL_RESTART_EXPECTED}; got restart for a {backend}")
    if action == "restart" and "Never" in restart_policies:
        raise BadInput(f"--on-stall restart: run_policy.backoff_limit expected {STALL_RESTART_BACKOFF}; got 0 "
                       "(restart policy Never)")
    return action, max_restarts


def deleted_exit(session) -> int | None:
    """1 (with the reason on stderr) when the session deleted the run (a stall, a health rule's stop), else None."""
    from launcher.cli.cluster import err
    from launcher.errors import EXIT_RUN_FAILED

    if session is None or session.deleted_reason is None:
        return None
    err(f"run deleted by the watchdog ({session.deleted_by}): {session.deleted_reason}")
    return EXIT_RUN_FAILED
