"""`launcher data put CONFIG LOCAL_DIR`: copy local parquet files onto the run's volume before training."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import add_config_arguments

HELP = "copy local parquet files onto the run's volume (data put CONFIG DIR): resumable, verified on arrival"
DESCRIPTION = (
    "data put CONFIG LOCAL_DIR copies LOCAL_DIR's *.parquet files into data.dir on the PersistentVolumeClaim the "
    "config mounts (storage.claim_name), through a short-lived pod that runs with the run's image, security context "
    "and placement (named <name>-data-put, deleted afterwards unless --keep-pod). Files already there with the same "
    "sha256 are skipped; an interrupted copy resumes where it stopped; each file's size and sha256 are checked in "
    "the pod before it is renamed into place. With data.dataset parquet each file is first checked here for the "
    "columns verl reads (prompt, data_source, reward_model). Needs create/delete pods and create pods/exec "
    "(`launcher rbac`)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    put = sub.add_parser("put", help="copy LOCAL_DIR/*.parquet into data.dir on the run's volume",
                         description=DESCRIPTION, formatter_class=parser.formatter_class)
    add_config_arguments(put)
    put.add_argument("local_dir", metavar="LOCAL_DIR", help="directory holding the parquet files (not recursive)")
    add_cluster_arguments(put, runs_dir=False)
    put.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                     help="wait at most this long for the copy pod to start (default 300)")
    put.add_argument("--keep-pod", action="store_true", help="leave the copy pod running (it ends within the hour)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from launcher.cli.common import load_from_args

    spec = load_from_args(args)
    files = local_files(spec, Path(args.local_dir))  # every refusal before any request
    return put(args, spec, files)


def local_files(spec, local_dir) -> list:
    """LOCAL_DIR's parquet files, after the checks that need no cluster (raises BadInput naming what is wrong)."""
    from launcher.errors import BadInput
    from launcher.kube.transfer import LocalFile

    st, data = spec.storage, spec.data
    if not st.claim_name:
        raise BadInput("storage.claim_name: expected the PersistentVolumeClaim the run mounts (data put copies onto "
                       "it; without one each pod gets its own empty volume), got null")
    if not (data.dir + "/").startswith(st.mount_path.rstrip("/") + "/"):
        raise BadInput(f"data.dir: expected a directory under storage.mount_path ({st.mount_path}), where the claim "
                       f"is mounted, got {data.dir!r}")
    if not local_dir.is_dir():
        raise BadInput(f"{local_dir}: expected a directory of parquet files, found "
                       f"{'a file' if local_dir.exists() else 'nothing'}")
    paths = sorted(p for p in local_dir.glob("*.parquet") if p.is_file())
    if not paths:
        raise BadInput(f"{local_dir}: expected *.parquet files, found none")
    if data.dataset == "parquet":
        from launcher.entrypoint.user_data import check_parquet

        for p in paths:
            check_parquet(str(p))
    return [LocalFile.of(p) for p in paths]


def put(args, spec, files) -> int:
    """Start (or reuse) the copy pod, copy `files` into data.dir, delete the pod."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from launcher.cli.cluster import connect
    from launcher.kube.transfer import put_files
    from launcher.render.manifests import render_data_pod

    ns = args.namespace or spec.scheduling.namespace
    spec = spec.model_copy(update={"scheduling": spec.scheduling.model_copy(update={"namespace": ns})})
    kube = connect(args, namespace=ns)
    pod = render_data_pod(spec)
    name = pod["metadata"]["name"]
    console = Console(stderr=True)
    start_pod(kube, pod, args.timeout, console)
    try:
        total = sum(f.size for f in files)
        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), console=console, transient=True) as bar:
            task = bar.add_task(f"copying {len(files)} file(s) to {spec.data.dir}", total=total)
            sent = put_files(kube, name, files, spec.data.dir, on_bytes=lambda n: bar.advance(task, n))
    finally:
        if not args.keep_pod:
            stop_pod(kube, name, console)
    for s in sent:
        print(s.line())
    present = {f.path.name for f in files}
    for field, path in (("data.train_files", spec.data.train_path), ("data.val_files", spec.data.val_path)):
        if path.rsplit("/", 1)[0] == spec.data.dir and path.rsplit("/", 1)[1] not in present:
            console.print(f"note: {field} is {path}, which this put did not copy")
    print(f"{len(sent)} file(s) in {spec.data.dir} on PersistentVolumeClaim {spec.storage.claim_name} ({ns})")
    return 0


def start_pod(kube, pod: dict, timeout: float, console) -> None:
    """Create the copy pod (a finished one of an earlier put is replaced) and wait until it runs."""
    import time

    from launcher.errors import RunFailed
    from launcher.kube import POD, ClusterTimeout
    from launcher.kube import jobs as J
    from launcher.spec.names import instance_selector

    name = pod["metadata"]["name"]
    selector = instance_selector(name)
    found = kube.list(POD, selector=selector)
    if found and J.pod_finished(found[0]):
        stop_pod(kube, name, console)
        found = []
    if not found:
        kube.create(pod)
    deadline = time.monotonic() + timeout
    with console.status(f"starting pod {name}") as status:
        while True:
            now = kube.list(POD, selector=selector)
            phase = ((now[0].get("status") or {}).get("phase") if now else None) or "Pending"
            if phase == "Running":
                return
            problem = J.pod_problem(now[0]) if now else None
            if phase in ("Succeeded", "Failed"):
                raise RunFailed(f"pod {name} ended before the copy ({problem or phase})")
            if time.monotonic() > deadline:
                raise ClusterTimeout(f"pod {name} did not start within {timeout:g}s: {problem or phase}")
            status.update(f"starting pod {name}: {problem or phase}")
            time.sleep(1)


def stop_pod(kube, name: str, console) -> None:
    """Delete the copy pod and wait until it is gone (its volume is free again for the run's pods)."""
    import time

    from launcher.kube import POD
    from launcher.spec.names import instance_selector

    kube.delete(POD, name)
    with console.status(f"deleting pod {name}"):
        while kube.list(POD, selector=instance_selector(name)):
            time.sleep(1)
