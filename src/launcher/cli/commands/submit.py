"""`launcher submit CONFIG`: pre-flight checks, create the run's objects (or attach), optionally follow."""

from __future__ import annotations

import argparse
import sys

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.watchdog import add_watchdog_arguments
from launcher.cli.common import add_config_arguments

HELP = "submit an experiment (same config twice attaches to the existing run)"
DESCRIPTION = (
    "Validate CONFIG, check the cluster (operator CRD, namespace, GPU nodes, Kueue LocalQueue), then create the "
    "ConfigMap/PVC and the PyTorchJob, RayJob, or TrainingRuntime + TrainJob. The job name carries the config hash, so submitting the same config "
    "again attaches to the existing run; a different config under the same experiment name is refused unless --new. "
    "Writes runs/<job>/spec.yaml and manifests.yaml. --follow on a terminal shows a progress line and a table of "
    "the last steps' metrics; with --logs, or when stdout is not a terminal, it prints every raw log line with a "
    "[pod] prefix instead. Either way the raw logs are saved under runs/<job>/logs/."
)

CRD_MISSING = {
    "pytorchjob": "Kubeflow Training Operator is not installed: no kubeflow.org/v1 PyTorchJob",
    "rayjob": "KubeRay is not installed: no ray.io/v1 RayJob",
    "trainjob": "Kubeflow Trainer v2 is not installed: no trainer.kubeflow.org/v1alpha1 TrainJob and TrainingRuntime",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--dry-run", nargs="?", const="client", choices=["client", "server"],
                        help="client: only render and print; server: send with dryRun=All and print what the "
                             "server would create")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="follow the run until the job finishes, exit 0/1 by its state: on a terminal a progress "
                             "line and a per-step metrics table, else every log line (raw logs: runs/<job>/logs/)")
    parser.add_argument("--logs", action="store_true",
                        help="with --follow (implied): print every raw log line, [pod]-prefixed, even on a terminal")
    parser.add_argument("--queue", metavar="LOCALQUEUE",
                        help="submit through this Kueue LocalQueue of the namespace (scheduling.queue): the job is "
                             "created suspended for Kueue to admit; refused before anything is created if the "
                             "LocalQueue does not exist")
    parser.add_argument("--new", action="store_true",
                        help="start a run even if the experiment already has one with a different config, and "
                             "start this config over: its pods set the checkpoint directory's earlier contents "
                             "(checkpoints, the finished marker) aside instead of resuming or skipping a finished run")
    add_watchdog_arguments(parser)
    from launcher.export.targets import add_export_arguments

    add_export_arguments(parser, live=True)


def run(args: argparse.Namespace) -> int:
    from launcher.cli.common import load_from_args

    if args.namespace:
        args.sets = [*args.sets, f"scheduling.namespace={args.namespace}"]
    from launcher.errors import BadInput
    from launcher.export.targets import check_export_arguments, wants_export

    if args.queue:
        args.sets = [*args.sets, f"scheduling.queue={args.queue}"]
    spec = load_from_args(args)  # BadInput (exit 2) before any client exists
    from launcher.cli.watchdog import check_flags

    check_flags(args, spec)  # a bad watchdog flag is bad input too
    check_export_arguments(args)
    if wants_export(args) and not (args.follow or args.logs):
        raise BadInput("--mlflow/--tensorboard: expected --follow with them (or use `launcher export RUN_DIR` later)")
    from launcher.render.manifests import render, to_yaml

    # --new: a token the run's entrypoint has not seen makes it start over once (entrypoint.resume.start_over)
    objects = render(spec, start_over=start_over_token() if args.new else None)
    if args.dry_run == "client":
        print(to_yaml(objects), end="")
        return 0
    return _submit(args, spec, objects)


def _submit(args, spec, objects, *, pinned_images=None, relaunched_from=None) -> int:
    """Create (or attach to) the run and follow it if asked. `pinned_images`/`relaunched_from`: a relaunch's
    record for provenance.json (the objects already carry the pinned images)."""
    from launcher.run import provenance
    from launcher.cli.cluster import connect, err, follow_run, live_export
    from launcher.cli.watchdog import deleted_exit, session_for
    from launcher.spec.load import dump_spec
    from launcher.errors import BadInput
    from launcher.kube import JOB_RESOURCES
    from launcher.kube import jobs as J
    from launcher.render.manifests import to_yaml
    from launcher.run.dirs import RunDir

    kube = connect(args, spec.scheduling.namespace)
    kube.namespace = spec.scheduling.namespace
    preflight(kube, spec)
    res = JOB_RESOURCES[spec.backend]
    name = spec.job_name
    existing = kube.get(res, name)
    attached = existing is not None
    if attached:
        if not J.owned(existing):
            raise BadInput(f"{res.kind} {name} exists but was not created by the launcher; not touching it")
        err(f"{res.kind} {name} already exists with this exact config: attaching to it (no new run created)")
    else:
        others = [r for r in J.list_runs(kube, experiment=spec.name) if r.name != name]
        if others and not args.new:
            names = ", ".join(sorted(r.name for r in others))
            raise BadInput(f"experiment {spec.name} already has run(s) with a different config in namespace "
                           f"{kube.namespace}: {names}; pass --new to start another run, or delete them")
    if args.dry_run == "server":
        if attached:
            err("server dry run: nothing would be created")
            return 0
        print(to_yaml(server_dry_run(kube, objects, on_notice=err)), end="")
        return 0

    run_dir = RunDir.of(name, args.runs_dir).ensure()
    if not attached:
        run_dir.write_text(run_dir.spec, dump_spec(spec))
        run_dir.write_text(run_dir.manifests, to_yaml(objects))
        provenance.write_submitted(run_dir, spec, pinned_images=pinned_images, relaunched_from=relaunched_from)
        job = create_all(kube, objects, on_notice=err)
        print(f"submitted {res.kind} {name} in namespace {kube.namespace} (run dir: {run_dir.path})", flush=True)
    else:
        job = existing
        if not run_dir.spec.exists():
            run_dir.write_text(run_dir.spec, dump_spec(spec))
            run_dir.write_text(run_dir.manifests, to_yaml(objects))
            provenance.write_submitted(run_dir, spec)
        print(f"attached to {res.kind} {name} in namespace {kube.namespace} (run dir: {run_dir.path})", flush=True)
    if not (args.follow or args.logs):
        return 0
    ref = J.JobRef(spec.backend, name, job)
    watch = session_for(args, kube, ref, run_dir)
    export = live_export(args, run_dir)
    table = display_mode(args.logs, sys.stdout) == "table"
    result = follow_run(kube, ref, run_dir, total_steps=spec.trainer.total_training_steps, table=table, watch=watch,
                        export=export)
    if table and result.state.finished and not result.state.succeeded:
        show_saved_tail(run_dir, ref.name)  # the lines were not on screen: show how it ended
    deleted = deleted_exit(watch)
    return deleted if deleted is not None else _exit_for(result.state, err)


def start_over_token() -> str:
    """`submit --new`'s token: its UTC time, unique per submission of a run."""
    import time

    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def display_mode(logs: bool, stdout) -> str:
    """"table" (progress line + step table) on a terminal, "lines" (every raw line) with --logs or off one."""
    isatty = getattr(stdout, "isatty", None)
    return "table" if not logs and isatty is not None and isatty() else "lines"


def show_saved_tail(run_dir, job: str, tail: int = 20) -> None:
    """The last `tail` saved lines of each pod's raw log, on stderr, `[pod]`-prefixed."""
    from launcher.cli.cluster import err

    for path in sorted(run_dir.logs.glob("*.log")) if run_dir.logs.is_dir() else []:
        short = path.name[:-4].removeprefix(job + "-")
        for line in path.read_bytes().decode("utf-8", "replace").split("\n")[:-1][-tail:]:
            err(f"[{short}] {line}")
    err(f"(full logs: {run_dir.logs}/)")


def _exit_for(state, err) -> int:
    if state.succeeded:
        err(f"run succeeded ({state.reason})" if state.reason else "run succeeded")
        return 0
    err(f"run {state.phase.lower()}: {state.reason or 'no reason given'}")
    return 1


def backends_hint(served: list[str]) -> str:
    """`; the cluster serves: rayjob (RayJob); use --backend rayjob`, or that it serves none of them."""
    from launcher.kube import jobs as J

    if not served:
        kinds = ", ".join(k.kind for b in J.BACKENDS for k in J.BACKEND_KINDS[b][:1])
        return f"; the cluster serves no backend's API ({kinds}); nothing was created"
    listed = ", ".join(f"{b} ({J.BACKEND_KINDS[b][0].kind})" for b in served)
    return f"; the cluster serves: {listed}; use --backend {served[0]}; nothing was created"


def preflight(kube, spec) -> None:
    """Checks before anything is created: CRD, namespace, GPU nodes (warning), Kueue LocalQueue."""
    from launcher.cli.cluster import err
    from launcher.errors import ClusterError
    from launcher.kube import FORBIDDEN, NAMESPACE, NODE, unless_forbidden
    from launcher.kube import jobs as J
    from launcher.kube import kueue

    served = J.served_backends(kube)
    if spec.backend not in served:
        raise ClusterError(CRD_MISSING[spec.backend] + backends_hint(served))
    ns = spec.scheduling.namespace
    # namespaced users may not read Namespace objects (403): the create will tell
    if unless_forbidden(kube.get, NAMESPACE, ns, default=FORBIDDEN) is None:
        raise ClusterError(f"namespace {ns} does not exist on {kube.server}")
    # The LocalQueue before the nodes: a missing queue is an error, the nodes only a warning.
    if spec.scheduling.queue:
        queue = spec.scheduling.queue
        version = kueue.served_version(kube, "localqueues")
        if version is None:
            raise ClusterError(f"Kueue is not installed: no {kueue.GROUP} ({'/'.join(kueue.VERSIONS)}) LocalQueue "
                               f"(scheduling.queue is {queue})")
        if kube.get(kueue.localqueue(version), queue, namespace=ns) is None:
            raise ClusterError(f"Kueue LocalQueue {queue} does not exist in namespace {ns} ({kueue.GROUP}/{version}; "
                               f"kubectl get localqueues -n {ns}); nothing was created")
    res = spec.resources
    if res.cpu_only:
        return  # a CPU-only pod (gpus_per_node 0) needs no GPU node: nothing to check
    nodes = unless_forbidden(kube.list, NODE)
    if nodes is None:
        err(f"warning: cannot list nodes to check for {res.gpu_type or 'GPU'} nodes (forbidden); skipping that check")
        return
    from launcher.doctor.nodes import unmatched_gpu_nodes
    from launcher.spec.gpu import matches
    from launcher.render.manifests import gpu_pod_requirements

    unmatched = unmatched_gpu_nodes(spec, nodes)
    if unmatched:
        err(f"warning: {unmatched}. The pods will stay Pending unless an autoscaler adds such nodes "
            "(`launcher doctor CONFIG` says what to change)")
        return
    reqs = gpu_pod_requirements(spec)
    fit = [n for n in nodes if matches((n.get("metadata") or {}).get("labels") or {}, reqs)
           and _int((n.get("status") or {}).get("allocatable", {}).get(res.gpu_resource)) >= res.gpus_per_node]
    if len(fit) < res.nodes:
        from launcher.spec.gpu import describe

        err(f"warning: {len(fit)} node(s) match {describe(reqs) or '(any node)'} with at least "
            f"{res.gpus_per_node} {res.gpu_resource} allocatable; the run needs {res.nodes}. The pods will stay "
            "Pending unless an autoscaler adds nodes.")


def _int(v) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


# Trainer v2.2's TrainJob webhook (`pkg/runtime/core/trainingruntime.go` ValidateObjects) reads the referenced
# TrainingRuntime from the cluster; a dry run never stores the one it just validated.
RUNTIME_NOT_CREATED = "specified trainingRuntime must be created before the TrainJob is created"


def server_dry_run(kube, objects: list[dict], on_notice=lambda m: None) -> list[dict]:
    """Each object as the API server would create it (dryRun=All), nothing stored.

    A TrainJob whose TrainingRuntime is not in the cluster yet (a dry run does not store it) passes the API
    server's schema and CEL validation, which run before validating webhooks, and is then refused by Trainer's
    webhook for that reason alone: it is shown as rendered, with a notice saying so."""
    from launcher.kube import ApiError

    out = []
    for obj in objects:
        try:
            out.append(kube.create(obj, dry_run=True))
        except ApiError as exc:
            if obj.get("kind") != "TrainJob" or RUNTIME_NOT_CREATED not in str(exc):
                raise
            on_notice(f"server dry run: TrainJob {obj['metadata']['name']} passed the API server's schema validation; "
                      f"Kubeflow Trainer's webhook checks it only against a stored TrainingRuntime, which a dry run "
                      "does not create: shown as rendered")
            out.append(obj)
    return out


# Trainer's webhook reads TrainingRuntimes from its controller's informer cache, which can lag the create of the
# runtime just before (seen on the local cluster: refused ~0.1 s after the runtime was stored). How long to retry.
RUNTIME_CACHE_WAIT_S = 20.0


def _create_trainjob(kube, obj: dict, created: list[dict]) -> dict:
    """Create a TrainJob, retrying while Trainer's webhook has not yet seen the TrainingRuntime this call created."""
    import time

    from launcher.kube import ApiError

    ref = (obj.get("spec") or {}).get("runtimeRef") or {}
    ours = any(o.get("kind") == ref.get("kind") and o["metadata"]["name"] == ref.get("name") for o in created)
    deadline, delay = time.monotonic() + RUNTIME_CACHE_WAIT_S, 0.2
    while True:
        try:
            return kube.create(obj)
        except ApiError as exc:
            if not ours or RUNTIME_NOT_CREATED not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def create_all(kube, objects: list[dict], on_notice=lambda m: None) -> dict:
    """Create in apply order; on a failure delete what this call created, then raise. Returns the job."""
    from launcher.kube import PVC, ApiError, resource_of

    created: list[dict] = []
    try:
        for obj in objects:
            try:
                out = _create_trainjob(kube, obj, created) if obj.get("kind") == "TrainJob" else kube.create(obj)
            except ApiError as exc:
                # a claim is shared by design (same claim_name across runs): reuse it, never delete it
                if exc.status == 409 and resource_of(obj) is PVC:
                    on_notice(f"PersistentVolumeClaim {obj['metadata']['name']} already exists: reusing it")
                    continue
                raise
            created.append(out)
    except BaseException:
        for obj in reversed(created):
            try:
                kube.delete(resource_of(obj), obj["metadata"]["name"])
                on_notice(f"rolled back: deleted {obj['kind']} {obj['metadata']['name']}")
            except Exception as exc:  # report, keep rolling back the rest
                on_notice(f"warning: could not delete {obj['kind']} {obj['metadata']['name']} during rollback: {exc}")
        raise
    return created[-1]
