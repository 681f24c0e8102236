"""`launcher sweep CONFIG --grid KEY=V1,V2 [...]`: the cross product of the grids as distinct runs, rendered,
submitted (through Kueue, or at most --max-parallel at a time), followed in one process and reported together."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import add_config_arguments, mark_completion

HELP = "run a grid of variants of an experiment (--grid KEY=V1,V2): submit, follow together, rank in one report"
DESCRIPTION = (
    "Expand CONFIG with every combination of the --grid values (dotted keys as --set takes them) into distinct "
    "runs, each with its own config hash, job name and run directory. --dry-run prints every run's manifests, "
    "--output-dir DIR writes them (DIR/<job>/NN-kind-name.yaml and DIR/sweep.json; --gitops as render). Otherwise "
    "the runs are submitted: with a Kueue queue (scheduling.queue / --queue) all at once for Kueue to admit, else "
    "all at once or at most --max-parallel N at a time (the next when one finishes). --follow (implied by "
    "--max-parallel) follows all of them in one progress view, then writes the sweep report (one table of every "
    "run's steady-window figures, the ranking by --metric with 95% intervals, overlaid plots) into "
    "runs/sweeps/<sweep>/. Running the same sweep again attaches to the runs that exist instead of resubmitting."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="an axis of the sweep: a dotted config key (as --set) and its comma-separated values, "
                             "e.g. --grid rollout.n=2,4 (repeatable: the runs are the cross product)")
    add_cluster_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="only render every run's manifests and print them")
    mark_completion(parser.add_argument("--output-dir", "-d", metavar="DIR",
                                        help="write every run's manifests into DIR/<job>/ and DIR/sweep.json "
                                             "instead of submitting"), "dir")
    parser.add_argument("--gitops", action="store_true",
                        help="with --dry-run/--output-dir: GitOps output (no TTL self-deletion), as render")
    parser.add_argument("--queue", metavar="LOCALQUEUE",
                        help="submit every run through this Kueue LocalQueue (scheduling.queue): Kueue admits them "
                             "as its quota allows")
    parser.add_argument("--max-parallel", type=int, metavar="N",
                        help="without a queue: at most N runs at a time, the next submitted when one finishes "
                             "(implies --follow)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="follow every run until it finishes, then write the sweep report; exit 1 if any failed")
    parser.add_argument("--metric", default=None, metavar="KEY",
                        help="rank the runs by this metric's steady-window mean (default critic/score/mean)")
    parser.add_argument("--goal", choices=["max", "min"],
                        help="whether the best run has the largest or smallest --metric (default: min for "
                             "timing_s/step and response_length/clip_ratio, else max)")
    parser.add_argument("--warmup-steps", type=int, default=1, metavar="K",
                        help="training steps left out of each steady window (default 1)")
    parser.add_argument("--no-plots", action="store_true", help="skip the report's PNG plots")


def run(args: argparse.Namespace) -> int:
    from launcher.errors import BadInput
    from launcher.run.sweep import expand, parse_grid

    if args.namespace:
        args.sets = [*args.sets, f"scheduling.namespace={args.namespace}"]
    if args.queue:
        args.sets = [*args.sets, f"scheduling.queue={args.queue}"]
    if args.max_parallel is not None and args.max_parallel < 1:
        raise BadInput(f"--max-parallel: expected a whole number >= 1, got {args.max_parallel}")
    if args.warmup_steps < 0:
        raise BadInput(f"--warmup-steps: expected >= 0, got {args.warmup_steps}")
    if args.gitops and not (args.dry_run or args.output_dir):
        raise BadInput("--gitops: expected --dry-run or --output-dir with it (it shapes rendered output only)")
    from launcher.cli.common import check_output_dir

    check_output_dir(args.output_dir)  # `-d json` out of kubectl habit: refused, naming the flag
    if args.metric is not None and not _metric_ok(args.metric):
        raise BadInput(f"--metric: expected a verl metric key such as critic/score/mean or timing_s/step (or "
                       f"throughput_total), got {args.metric!r}")
    sweep = expand(args.config, parse_grid(args.grid, args.sets), args.sets, args.backend)
    queue = sweep.members[0].spec.scheduling.queue
    if queue and args.max_parallel is not None:
        raise BadInput(f"--max-parallel: not with a Kueue queue (scheduling.queue={queue}): every run is submitted "
                       "and Kueue admits them as the queue's quota allows")
    from launcher.render.manifests import render

    rendered = {m.job: render(m.spec, gitops=args.gitops) for m in sweep.members}
    if args.dry_run or args.output_dir:
        return _write_rendered(args, sweep, rendered)
    return _submit_and_follow(args, sweep, rendered)


def _metric_ok(metric: str) -> bool:
    import re

    return metric == "throughput_total" or bool(re.fullmatch(r"[\w@.\-]+(/[\w@.\-]+)+", metric))


def _summary(sweep, err) -> None:
    err(f"sweep {sweep.name}: {len(sweep.members)} run(s) over " + ", ".join(sweep.varied))
    for m in sweep.members:
        err(f"  {m.job}  {m.label()}")


def _write_rendered(args, sweep, rendered) -> int:
    from pathlib import Path

    from launcher.cli.cluster import err
    from launcher.render.manifests import object_filename, to_yaml
    from launcher.run.sweep import read_sweep_file, write_sweep_file

    _summary(sweep, err)
    if args.dry_run and not args.output_dir:
        print(to_yaml([o for objs in rendered.values() for o in objs]), end="")
        return 0
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    old = read_sweep_file(out) or {}
    for m in old.get("members") or []:  # a member the new grid dropped must not stay in a GitOps tree
        job = str(m.get("job", ""))
        if job and job not in rendered and "/" not in job and (out / job).is_dir():
            for stale in (out / job).glob("[0-9][0-9]-*.yaml"):
                stale.unlink()
            if not any((out / job).iterdir()):
                (out / job).rmdir()
    for job, objects in rendered.items():
        d = out / job
        d.mkdir(exist_ok=True)
        for stale in d.glob("[0-9][0-9]-*.yaml"):
            stale.unlink()
        for index, obj in enumerate(objects):
            (d / object_filename(obj, index)).write_text(to_yaml([obj]))
    write_sweep_file(out, sweep.document())
    print(f"wrote {len(rendered)} run(s) to {out}/ (one directory per job) and {out / 'sweep.json'}")
    return 0


def _submit_and_follow(args, sweep, rendered) -> int:
    from launcher.cli.cluster import connect, err
    from launcher.cli.commands.submit import preflight
    from launcher.run.dirs import RunDir, runs_root
    from launcher.run.sweep import sweep_dir, write_sweep_file

    first = sweep.members[0].spec
    kube = connect(args, first.scheduling.namespace)
    kube.namespace = first.scheduling.namespace
    checked: set[str] = set()
    for m in sweep.members:  # once per distinct backend/placement: the checks read the same objects
        key = m.spec.backend + m.spec.resources.model_dump_json() + str(m.spec.scheduling.queue)
        if key not in checked:
            checked.add(key)
            preflight(kube, m.spec)
    home = sweep_dir(runs_root(args.runs_dir), sweep.name)
    write_sweep_file(home, sweep.document(lambda job: RunDir.of(job, args.runs_dir).path))
    _summary(sweep, err)
    follow = args.follow or args.max_parallel is not None
    runner = SweepRunner(kube, sweep, rendered, args.runs_dir, err=err)
    if not follow:
        for m in sweep.members:
            runner.start(m)
        err(f"sweep file: {home / 'sweep.json'} (follow them all: launcher sweep ... --follow)")
        return 0
    results = runner.run_all(args.max_parallel)
    return _report(args, sweep, results, home)


def _report(args, sweep, results, home) -> int:
    from launcher.cli.cluster import err
    from launcher.errors import BadInput
    from launcher.report.load import load_run
    from launcher.report.sweep import DEFAULT_METRIC, write_sweep_report
    from launcher.run.dirs import RunDir

    runs = {}
    for m in sweep.members:
        try:
            runs[m.job] = load_run(RunDir.of(m.job, args.runs_dir).path)
        except BadInput as exc:
            err(f"warning: {m.job}: {exc}")
    states = {job: {"phase": st.phase, "succeeded": st.succeeded, "reason": st.reason}
              for job, st in results.items() if st is not None}
    doc, written = write_sweep_report(sweep.document(), runs, home, states, metric=args.metric or DEFAULT_METRIC,
                                      goal=args.goal, warmup_steps=args.warmup_steps, plots=not args.no_plots)
    _print_ranking(doc)
    print(f"sweep report: {written['sweep.md']}", flush=True)
    failed = [job for job, st in results.items() if st is None or not st.succeeded]
    if failed:
        err(f"{len(failed)} run(s) did not succeed: " + ", ".join(failed))
        return 1
    return 0


def _print_ranking(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from launcher.report.markdown import num

    table = Table(title=f"sweep {doc['sweep']}: ranked by {doc['metric']} ({doc['goal']}, steady window)")
    table.add_column("rank", justify="right")
    table.add_column("run")
    for k in doc["varied"]:
        table.add_column(k, justify="right")
    table.add_column(f"{doc['metric']} mean", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("state")
    for r in doc["runs"]:
        m = r.get("metric") or {}
        ci = m.get("ci95")
        table.add_row(str(r["rank"] or "-"), r["job"], *(str(r["params"].get(k)) for k in doc["varied"]),
                      num(m.get("mean")), f"[{num(ci[0])}, {num(ci[1])}]" if ci else "n/a",
                      (r.get("state") or {}).get("phase", "n/a"))
    Console(width=200).print(table)


class SweepRunner:
    """Submits (or attaches to) each member and follows them, each in its own thread, into one `SweepView`."""

    def __init__(self, kube, sweep, rendered, runs_dir, *, err):
        import queue

        self.kube = kube
        self.sweep = sweep
        self.rendered = rendered
        self.runs_dir = runs_dir
        self.err = err
        self.done: queue.Queue = queue.Queue()
        self.view = None

    def start(self, member):
        """Create the member's objects unless its job exists (then attach); returns its `JobRef`."""
        from launcher.run import provenance
        from launcher.cli.commands.submit import create_all
        from launcher.spec.load import dump_spec
        from launcher.errors import BadInput
        from launcher.kube import JOB_RESOURCES
        from launcher.kube import jobs as J
        from launcher.render.manifests import to_yaml
        from launcher.run.dirs import RunDir

        spec = member.spec
        res = JOB_RESOURCES[spec.backend]
        existing = self.kube.get(res, member.job)
        run_dir = RunDir.of(member.job, self.runs_dir).ensure()
        objects = self.rendered[member.job]
        fresh = existing is None or not run_dir.spec.exists()
        if fresh:
            run_dir.write_text(run_dir.spec, dump_spec(spec))
            run_dir.write_text(run_dir.manifests, to_yaml(objects))
            provenance.write_submitted(run_dir, spec)
        if existing is not None:
            if not J.owned(existing):
                raise BadInput(f"{res.kind} {member.job} exists but was not created by the launcher; not touching it")
            self._say(f"attached to {res.kind} {member.job} ({member.label()}): it exists with this exact config")
            return J.JobRef(spec.backend, member.job, existing)
        job = create_all(self.kube, objects, on_notice=self.err)
        self._say(f"submitted {res.kind} {member.job} ({member.label()}) in namespace {self.kube.namespace}")
        return J.JobRef(spec.backend, member.job, job)

    def _say(self, msg: str) -> None:
        if self.view is not None:
            self.view.notice(msg)
        else:
            print(msg, flush=True)

    def run_all(self, max_parallel: int | None) -> dict:
        """Start the members (at most `max_parallel` followed at a time), follow each to its end; job -> final
        `JobState` (None when its follow failed)."""
        import threading
        from collections import deque

        from launcher.cli.progress import SweepView

        pending = deque(self.sweep.members)
        active: set[str] = set()
        results: dict = {}
        self.view = SweepView(self.sweep)
        with self.view:
            while pending or active:
                while pending and (max_parallel is None or len(active) < max_parallel):
                    member = pending.popleft()
                    ref = self.start(member)
                    active.add(member.job)
                    threading.Thread(target=self._follow, args=(member, ref), daemon=True,
                                     name=f"follow-{member.job}").start()
                try:
                    job, state, error = self.done.get(timeout=1.0)
                except Exception:  # queue.Empty: refresh the elapsed clocks
                    self.view.tick()
                    continue
                active.discard(job)
                results[job] = state
                if error:
                    self.view.notice(f"{job}: follow failed: {error}")
        return results

    def _follow(self, member, ref) -> None:
        from launcher.run.follow import LogFollower
        from launcher.run.dirs import RunDir

        job = member.job
        try:
            follower = LogFollower(self.kube, ref, RunDir.of(job, self.runs_dir),
                                   on_records=lambda recs: self.view.records(job, recs),
                                   on_notice=lambda msg: self.view.notice(f"{job}: {msg}"),
                                   on_status=lambda st, pods: self.view.status(job, st, pods))
            result = follower.run(follow=True)
            for e in result.errors:
                self.view.notice(f"{job}: warning: log follower: {e}")
            self.view.status(job, result.state, None)
            self.done.put((job, result.state, None))
        except Exception as exc:  # one run's follow failing must not stop the others' (its state: unknown)
            self.done.put((job, None, f"{type(exc).__name__}: {exc}"))
