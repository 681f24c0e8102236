"""`launcher doctor CONFIG`: check a cluster can run an experiment before spending GPU time on it."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import add_config_arguments

HELP = ("check that the cluster can run CONFIG (API, operators, Kueue, GPU nodes, RBAC; --smoke: a real job; "
        "--rehearse: two real verl steps of the experiment)")
DESCRIPTION = (
    "One line per check: ✓ ok, ! warning, ✗ failed (with the cause and the fix). Checks, in order: the API server "
    "and its version; the namespace; what the cluster serves (the backend's CRDs, TrainJob, Kueue and "
    "scheduling.queue's LocalQueue/ClusterQueue); nodes matching the GPU label and node selector whose taints the "
    "config tolerates, with enough GPUs free on distinct nodes; RBAC (a SelfSubjectAccessReview per permission "
    "`launcher rbac` grants). --smoke then submits a small job derived from the experiment (workload: smoke, same "
    "image, pods, resources and backend, named <name>-doctor), follows it and reports its in-pod checks, one line per check "
    "over every pod (container user, read-only root, writable volumes, /dev/shm against smoke.min_shm, the "
    "dataset, verl's config, Ray, the pods reaching each other, the all-reduce, NCCL on GPU pods, the steps), "
    "deleting it afterwards unless --keep. --rehearse runs the experiment itself (same image, backend, pods, nodes "
    "and GPU requests, data, algorithm, reward and verl overrides) for two real verl steps of the built-in tiny "
    "model (builtin:tiny-qwen2, in the project's images) with a checkpoint at step 2, no validation and trackers "
    "off, named <name>-rehearse, and reports each stage verl ran (vLLM rollout, reward, FSDP update, weight sync, "
    "checkpoint) or the cause of its failure with the fix. Exit codes: 0 every check "
    "passed (warnings allowed), 1 a check failed, 2 bad input (nothing sent), 3 cluster unreachable or refused."
)
NAME_WIDTH = 22  # "smoke: nccl_allreduce" + 1 (names and findings stay apart by two spaces at least)
SMOKE_TIMEOUT_S = 600
# vLLM's start and the first step's warm-up dominate: ~2 min on the local cluster's CPU nodes, less on GPUs
REHEARSE_TIMEOUT_S = 1800


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--smoke", action="store_true",
                        help="also submit a small real job from the experiment (workload: smoke) and check it")
    parser.add_argument("--rehearse", action="store_true",
                        help="also run the experiment for two real verl steps of the built-in tiny model and check "
                             "each stage (vLLM, reward, FSDP update, weight sync, checkpoint)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"give each job this long to finish (default: --smoke {SMOKE_TIMEOUT_S:g}, --rehearse "
                             f"{REHEARSE_TIMEOUT_S:g})")
    parser.add_argument("--keep", action="store_true",
                        help="--smoke/--rehearse: keep the job (default: delete it)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text",
                        help="text: one line per check as it completes; json: one document at the end")


class _Out:
    """Prints checks as they complete (text) or collects them for one JSON document."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.checks: list = []

    def add(self, *checks) -> None:
        for c in checks:
            self.checks.append(c)
            if self.fmt == "text":
                print(c.line(NAME_WIDTH), flush=True)

    def finish(self, code: int, **meta) -> int:
        if self.fmt == "json":
            import json

            print(json.dumps({**meta, "checks": [c.to_json() for c in self.checks], "exit_code": code}, indent=2,
                             ensure_ascii=False))
        else:
            counts = {s: sum(c.status == s for c in self.checks) for s in ("ok", "warn", "fail")}
            print(f"{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed", flush=True)
        return code


def run(args: argparse.Namespace) -> int:
    from launcher.cli.cluster import connect
    from launcher.cli.common import load_from_args
    from launcher.doctor.check import FAIL, WARN, Check, exit_code
    from launcher.doctor.cluster import (check_api_server, check_backend, check_kueue, check_namespace, check_rbac,
                                         discover, unreachable)
    from launcher.doctor.nodes import check_nodes
    from launcher.doctor.rehearse import REHEARSAL, rehearsal_spec
    from launcher.doctor.smoke import smoke_spec
    from launcher.errors import EXIT_CLUSTER, ClusterError

    if args.namespace:
        args.sets = [*args.sets, f"scheduling.namespace={args.namespace}"]
    spec = load_from_args(args)  # BadInput (exit 2) before any client exists
    smoke = smoke_spec(spec) if args.smoke else None  # the same, for the smoke job
    rehearsal = rehearsal_spec(spec) if args.rehearse else None  # and for the rehearsal (BadInput: exit 2)
    out = _Out(args.output)
    meta = {"config": args.config, "experiment": spec.name, "backend": spec.backend,
            "namespace": spec.scheduling.namespace}
    try:
        kube = connect(args, spec.scheduling.namespace)
    except ClusterError as exc:
        out.add(Check("api-server", FAIL, str(exc), "pass --kubeconfig/--context or set $KUBECONFIG"))
        return out.finish(EXIT_CLUSTER, **meta)
    kube.namespace = spec.scheduling.namespace
    try:
        out.add(check_api_server(kube))
    except ClusterError as exc:
        out.add(unreachable(kube, exc))
        return out.finish(EXIT_CLUSTER, **meta)
    try:
        out.add(check_namespace(kube, spec))
        served = discover(kube)
        out.add(check_backend(spec, served))
        out.add(check_kueue(kube, spec, served))
        out.add(check_nodes(kube, spec))
        out.add(check_rbac(kube, spec))
        for what, job_spec in (("smoke", smoke), ("rehearse", rehearsal)):
            if job_spec is None:
                continue
            if any(c.status == FAIL for c in out.checks):
                out.add(Check(what, WARN, "not run: fix the failed checks above first"))
            elif what == "smoke":
                out.add(*run_smoke(kube, job_spec, args))
            else:
                from launcher.cli.cluster import err

                err(f"doctor: rehearsing {spec.name} as {job_spec.name}: {REHEARSAL}")
                out.add(*run_rehearsal(kube, job_spec, args))
    except ClusterError as exc:
        out.add(Check("cluster", FAIL, f"the cluster stopped answering or refused: {exc}",
                      "rerun once the API server is healthy (kubectl cluster-info)"))
        return out.finish(EXIT_CLUSTER, **meta)
    return out.finish(exit_code(out.checks), **meta)


def run_smoke(kube, spec, args) -> list:
    """Submit the smoke job, follow it to the end (or --timeout), read its `[smoke]` lines, delete it."""
    from launcher.doctor.smoke import smoke_checks

    done = _run_job(kube, spec, args, what="smoke", timeout=args.timeout or SMOKE_TIMEOUT_S)
    if isinstance(done, list):
        return done
    outcome, _rows, kept = done
    return smoke_checks(spec, outcome) + kept


def run_rehearsal(kube, spec, args) -> list:
    """Submit the rehearsal, follow it with verl's step lines parsed, check each stage verl ran, delete it."""
    from launcher.doctor.rehearse import rehearsal_checks

    done = _run_job(kube, spec, args, what="rehearse", timeout=args.timeout or REHEARSE_TIMEOUT_S, metrics=True)
    if isinstance(done, list):
        return done
    outcome, rows, kept = done
    return rehearsal_checks(spec, outcome, rows) + kept


def _run_job(kube, spec, args, *, what: str, timeout: float, metrics: bool = False):
    """Submit `spec`'s job, follow it to the end (or `timeout`), delete it unless --keep. Returns (SmokeOutcome,
    parsed step rows, [the kept check]), or the failed submit's checks."""
    from launcher.cli.cluster import err
    from launcher.cli.commands.delete import delete_run
    from launcher.cli.commands.submit import create_all
    from launcher.spec.load import dump_spec
    from launcher.run.follow import LogFollower
    from launcher.kube import JOB_RESOURCES, ApiError
    from launcher.kube import jobs as J
    from launcher.render.manifests import render, to_yaml
    from launcher.run.dirs import RunDir
    from launcher.doctor.check import FAIL, OK, Check
    from launcher.doctor.cluster import rbac_fix
    from launcher.doctor.smoke import SmokeOutcome

    res = JOB_RESOURCES[spec.backend]
    name = spec.job_name
    ns = spec.scheduling.namespace
    if kube.get(res, name) is not None:
        return [Check(f"{what}: submit", FAIL, f"{res.kind} {name} from an earlier doctor run is still there",
                      f"launcher delete {name} -n {ns}")]
    objects = render(spec)
    run_dir = RunDir.of(name, args.runs_dir).ensure()
    run_dir.write_text(run_dir.spec, dump_spec(spec))
    run_dir.write_text(run_dir.manifests, to_yaml(objects))
    try:
        job = create_all(kube, objects, on_notice=err)  # rolls back what it created on a failure
    except ApiError as exc:
        fix = (rbac_fix(ns, kube.whoami()) if exc.status == 403 else
               f"the API server refused the {what} job's objects: check admission policies (the message) or "
               "report it with the rendered manifests (launcher render CONFIG)")
        return [Check(f"{what}: submit", FAIL, f"could not create the {what} job: {exc}", fix)]
    err(f"doctor: submitted {what} {res.kind} {name} in {ns}; following it (at most {timeout:g}s)")
    ref = J.JobRef(spec.backend, name, job)
    pods: dict[str, dict] = {}
    lines: dict[str, list[str]] = {}
    rows: dict[int, dict] = {}

    def on_status(state, seen):
        for p in seen:
            pods[(p.get("metadata") or {}).get("uid") or p["metadata"]["name"]] = p
            lines.setdefault(J.short_name(p, name), [])

    def on_line(short, line):
        lines.setdefault(short, []).append(line)

    def on_records(records):
        for r in records:  # a restarted attempt's step wins
            rows[r.step] = {"step": r.step, **r.metrics}

    try:
        follower = LogFollower(kube, ref, run_dir, on_line=on_line, on_notice=lambda m: err(f"doctor: {m}"),
                               on_status=on_status, on_records=on_records, metrics=metrics)
        result = follower.run(follow=True, timeout=timeout)
    finally:
        if not args.keep:
            delete_run(kube, ref, on_deleted=lambda m: err(f"doctor: {m}"))
    outcome = SmokeOutcome(name, result.state, list(pods.values()), lines,
                           timed_out=not result.state.finished, timeout=timeout)
    kept = [Check(f"{what}: kept", OK, f"{res.kind} {name} kept (logs in {run_dir.path})")] if args.keep else []
    return outcome, [rows[s] for s in sorted(rows)], kept
