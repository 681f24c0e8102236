"""`launcher delete NAME`: delete a run's job and the ConfigMap/PVC it created; wait until its pods are gone."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_run_arguments

HELP = "delete a run (job + its ConfigMap/PVC and a TrainJob's TrainingRuntime, found by label) and wait until its pods are gone"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, runs_dir=False)
    parser.add_argument("--cascade", choices=["foreground", "background"], default="foreground",
                        help="propagation policy, as kubectl (default foreground: owners go after their pods)")
    parser.add_argument("--keep-pvc", action="store_true", help="keep a PersistentVolumeClaim the run created")
    parser.add_argument("--timeout", type=float, default=300, metavar="SECONDS", help="wait at most this long")
    parser.add_argument("--no-wait", action="store_true", help="return once the deletes are accepted")


def run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console

    from launcher.cli.cluster import connect, err
    from launcher.kube import TRAININGRUNTIME
    from launcher.kube import jobs as J

    kube = connect(args)
    ref = J.find_run(kube, args.name)
    delete_run(kube, ref, propagation=args.cascade.capitalize(), keep_pvc=args.keep_pvc)
    if args.no_wait:
        return 0
    deadline = time.monotonic() + args.timeout
    console = Console(stderr=True)
    with console.status(f"waiting for the pods of {ref.name} to go") as status:
        while True:
            left = J.job_pods(kube, ref)
            job_left = kube.get(ref.resource, ref.name) is not None
            # Trainer keeps its finalizer (trainer.kubeflow.org/resource-in-use) on a TrainingRuntime until no
            # TrainJob refers to it: the runtime goes a moment after the TrainJob, and the run is gone only then.
            # (found by label, as delete_run found it: the role `launcher rbac` renders lists runtimes, never gets)
            runtime_left = ref.backend == "trainjob" and bool(kube.list(TRAININGRUNTIME, selector=run_selector(ref)))
            if not left and not job_left and not runtime_left:
                break
            if time.monotonic() > deadline:
                err(f"timed out after {args.timeout:g}s: {len(left)} pod(s) still there"
                    + (", job still terminating" if job_left else "")
                    + (", TrainingRuntime still terminating" if runtime_left else ""))
                return 1
            status.update(f"waiting for {ref.name}: {len(left)} pod(s) left"
                          + (", job terminating (finalizers)" if job_left else "")
                          + (", TrainingRuntime terminating (Trainer's finalizer)" if runtime_left else ""))
            time.sleep(1)
    print(f"{ref.name}: all pods gone" + (", TrainingRuntime gone" if ref.backend == "trainjob" else ""))
    return 0


def run_selector(ref) -> str:
    """The label selector of what a run created besides its job: its labels *and* part-of=grpo-launcher."""
    from launcher.spec import names as L

    return f"{L.instance_selector(ref.name)},{L.OWNED_SELECTOR}"


def delete_run(kube, ref, *, propagation: str = "Foreground", keep_pvc: bool = False, on_deleted=print) -> None:
    """Delete the job, then the ConfigMap (and PVC) carrying this run's labels *and* part-of=grpo-launcher."""
    from launcher.kube import CONFIGMAP, PVC, TRAININGRUNTIME

    kube.delete(ref.resource, ref.name, propagation=propagation)
    on_deleted(f"deleted {ref.resource.kind} {ref.name} (propagation {propagation})")
    selector = run_selector(ref)
    # A TrainJob's own TrainingRuntime (same name and labels); after the TrainJob, which refers to it.
    extra = [TRAININGRUNTIME] if ref.backend == "trainjob" else []
    for res in extra + [CONFIGMAP] + ([] if keep_pvc else [PVC]):
        for obj in kube.list(res, selector=selector):
            if kube.delete(res, obj["metadata"]["name"], propagation=propagation):
                on_deleted(f"deleted {res.kind} {obj['metadata']['name']}")
