"""`launcher wait NAME`: block until the run finishes; exit 0 on success, 1 on failure (with why), 124 on --timeout."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_run_arguments
from launcher.cli.common import add_output_argument

HELP = "wait for a run to finish: exit 0 on success, 1 on failure (last log lines and the reason), 124 on timeout"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="give up after this long: exit 124, the run keeps going (default: wait forever)")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--tail", type=int, default=20, metavar="N", help="log lines to show on failure (default 20)")
    add_output_argument(parser, "the run's final state (a Run, plus result and exitCode)")


def run(args: argparse.Namespace) -> int:
    import time

    from launcher.cli.cluster import connect, err
    from launcher.cli.common import check_format
    from launcher.errors import EXIT_OK, EXIT_RUN_FAILED, EXIT_TIMEOUT, BadInput
    from launcher.kube import jobs as J

    fmt = check_format(args.output)
    if args.timeout is not None and args.timeout < 0:
        raise BadInput(f"--timeout: expected seconds ≥ 0, got {args.timeout:g}")
    kube = connect(args)
    ref = J.find_run(kube, args.name)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    last_problem = last_phase = None
    from launcher.errors import ClusterError
    from launcher.kube.client import transient
    from launcher.run.jobstate import PollState, state_source

    # the first look is one GET and LIST (a finished run needs no more); then the shared watches
    # (launcher.kube.informer), which cost the API server nothing while the run goes on
    source = PollState(kube)
    try:
        while True:
            try:
                obj, pods = source.read(ref)
                ref = J.JobRef(ref.backend, ref.name, obj) if obj is not None else ref
            except ClusterError as exc:
                if not transient(exc) or (deadline is not None and time.monotonic() > deadline):
                    raise
                err(f"API server unavailable ({exc}); retrying")
                time.sleep(args.interval)
                continue
            state = J.job_state(ref.backend, obj)
            if state.finished:
                break
            if isinstance(source, PollState):
                source = state_source(kube, ref)
            if state.phase != last_phase and state.phase in ("Queued", "Suspended", "Restarting"):
                # held by Kueue (or pre-empted back into the queue): waiting on is right, and the user is told why
                err(f"{ref.name} is {state.phase}" + (f": {state.reason}" if state.reason else ""))
            last_phase = state.phase
            for p in pods:
                problem = J.pod_problem(p)
                if problem and problem != last_problem:
                    err(f"[{J.short_name(p, ref.name)}] {problem}")
                    last_problem = problem
            if deadline is not None and time.monotonic() > deadline:
                err(f"timed out after {args.timeout:g}s: {ref.name} is still {state.phase} (exit {EXIT_TIMEOUT})")
                return _result(kube, ref, state, "timeout", EXIT_TIMEOUT, fmt)
            source.wait(args.interval if deadline is None else
                        max(0.0, min(args.interval, deadline - time.monotonic())))
    finally:
        source.close()
    if state.succeeded:
        if not fmt:
            print(f"{ref.name} succeeded")
        return _result(kube, ref, state, "succeeded", EXIT_OK, fmt)
    _show_failure(kube, ref, state, args.tail, args.runs_dir)
    return _result(kube, ref, state, "failed", EXIT_RUN_FAILED, fmt)


def _result(kube, ref, state, result: str, code: int, fmt: str | None) -> int:
    """Exit `code`; with `-o` first print the final state (launcher.cli.common: Run + result, exitCode)."""
    if fmt:
        from launcher.cli.common import emit, run_object

        emit({**run_object(ref, kube.namespace, state), "result": result, "exitCode": code}, fmt)
    return code


def _show_failure(kube, ref, state, tail: int, runs_dir: str | None) -> None:
    from launcher.cli.cluster import err
    from launcher.errors import ClusterError
    from launcher.kube import jobs as J
    from launcher.run.dirs import RunDir

    pods = J.job_pods(kube, ref) if state.phase != "Deleted" else []
    run = RunDir.of(ref.name, runs_dir)

    def show_saved(paths) -> None:
        for path in paths:
            short = path.name[:-4].removeprefix(ref.name + "-")
            text = path.read_bytes().decode("utf-8", "replace")
            for line in text.split("\n")[:-1][-tail:]:
                err(f"[{short}] {line} (saved)")

    if not pods:
        # the training-operator deletes a failed job's pods (whatever cleanPodPolicy says), taking their logs
        # along: show what a follower saved in the run directory instead
        saved = sorted(run.logs.glob("*.log")) if run.logs.is_dir() else []
        if not saved:
            err(f"{ref.name}: its pods are gone and no log was saved (follow runs with `submit --follow` or "
                "`logs -f` to keep them)")
        show_saved(saved)
    for p in pods:
        problem = J.pod_problem(p)
        short = J.short_name(p, ref.name)
        if problem:
            err(f"[{short}] {problem}")
        saved = run.logs / f"{p['metadata']['name']}.log"
        if not (p.get("status") or {}).get("containerStatuses") and saved.is_file():
            # the operator's retry of a pod that failed, never started (e.g. Unschedulable once the job failed):
            # it has no log; what failed is in the earlier instance's, which the follower saved
            show_saved([saved])
            continue
        container = J.main_container(p)
        try:
            resp = kube.pod_log(p["metadata"]["name"], container=container, tail_lines=tail, timestamps=False,
                                read_timeout=10)
            text = resp.read().decode("utf-8", "replace")
            resp.release_conn()
        except ClusterError as exc:
            text = ""
            err(f"[{short}] no log: {exc}")
        for line in text.splitlines()[-tail:]:
            err(f"[{short}] {line}")
    err(f"{ref.name} failed: {state.reason or state.phase}")
