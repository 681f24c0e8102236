"""`launcher relaunch RUN_DIR [--set ...]`: submit exactly what a run ran again, its image pinned by digest."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.cli.cluster import add_cluster_arguments
from launcher.cli.common import mark_completion
from launcher.cli.watchdog import add_watchdog_arguments

HELP = "submit a recorded run again: same spec (same job name), image pinned to the digest its pods ran"
DESCRIPTION = (
    "Reads RUN_DIR's spec.yaml and images.json and submits that spec again with every container's image pinned to "
    "the imageID its pods reported (containerStatuses[].imageID): the same config hash, so the same job name. "
    "With --set KEY=VALUE it submits a named variation instead (a new config hash, so a new job name), still on the "
    "pinned image unless --set image=... is given. When the run's own directory is the target (same job name) and "
    "the job is gone, the earlier directory is kept as <job>.prev-N beside it. Pods on KWOK fake nodes report no "
    "imageID: such a run is relaunched with the image reference as written, and says so."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mark_completion(parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<job>/)"), "dir")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="change a field for a named variation, e.g. --set rollout.n=4 (repeatable)")
    add_cluster_arguments(parser)
    parser.add_argument("--dry-run", nargs="?", const="client", choices=["client", "server"],
                        help="client: print the pinned objects; server: send with dryRun=All")
    parser.add_argument("--follow", "-f", action="store_true", help="follow the run, as submit --follow")
    parser.add_argument("--logs", action="store_true", help="with --follow (implied): print every raw log line")
    parser.add_argument("--new", action="store_true", help="as submit --new")
    add_watchdog_arguments(parser)


def pins_for(run_dir, image: str) -> tuple[dict[str, str], str | None]:
    """{image reference: pinned reference} from RUN_DIR's images.json, and a note when nothing can be pinned.

    BadInput when the run's containers ran more than one image for the reference (which to reproduce?)."""
    from launcher.run import provenance
    from launcher.errors import BadInput

    images = provenance.load_json(run_dir.images)
    if images is None:
        return {}, (f"{run_dir.images} is missing (the run was never followed): relaunching with the image "
                    f"reference as written, {image}")
    ran = provenance.digests_by_image(images)
    ids = ran.get(image, set())
    if len(ids) > 1:
        raise BadInput(f"{run_dir.images}: the pods ran {len(ids)} different images for {image} "
                       f"({', '.join(sorted(ids))}); pick one with --set image=REF@DIGEST")
    pins = {ref: next(iter(v)) for ref, v in ran.items() if len(v) == 1 and ref}
    note = None
    if not ids:
        note = (f"no imageID recorded for {image} (pods on KWOK fake nodes run no container and report none): "
                f"relaunching with the image reference as written")
    return pins, note


def run(args: argparse.Namespace) -> int:
    from launcher.cli.cluster import err
    from launcher.cli.watchdog import check_flags
    from launcher.cli.commands.submit import _submit
    from launcher.spec.load import load_spec
    from launcher.errors import BadInput
    from launcher.render.manifests import render, to_yaml
    from launcher.run.dirs import RunDir
    from launcher.run import provenance

    src = RunDir(Path(args.run_dir))
    if not src.spec.is_file():
        raise BadInput(f"RUN_DIR: expected a run directory with spec.yaml (what submit writes), got {args.run_dir}")
    sets = list(args.sets) + ([f"scheduling.namespace={args.namespace}"] if args.namespace else [])
    original = load_spec(src.spec)
    spec = load_spec(src.spec, sets)
    check_flags(args, spec)
    recorded = (provenance.load_json(src.provenance) or {}).get("job")
    if not sets and recorded and recorded != spec.job_name:
        raise BadInput(f"{src.spec} gives job {spec.job_name}, but the run recorded {recorded}: the spec was edited "
                       "or written by another launcher version; pass --set to relaunch it as a variation")
    pins: dict[str, str] = {}
    if spec.image == original.image:
        pins, note = pins_for(src, spec.image)
        if note:
            err(f"warning: {note}")
    objects = provenance.pin_images(render(spec), pins)
    if args.dry_run == "client":
        print(to_yaml(objects), end="")
        return 0
    used = {k: v for k, v in pins.items() if k == spec.image}
    if used:
        err(f"pinning {spec.image} to {used[spec.image]} (what the pods of {src.path.name} ran)")
    what = "same config, same job name" if spec.job_name == original.job_name else "a variation: new config hash"
    err(f"relaunching {src.path} as {spec.job_name} ({what})")
    origin = src.path if args.dry_run else _archive_if_reused(args, spec, src.path, err)
    return _submit(args, spec, objects, pinned_images=used, relaunched_from=str(origin))


def _archive_if_reused(args, spec, src: Path, err) -> Path:
    """Keep an earlier run's files: when the target run directory has logs and its job is gone, rename it.

    Returns where the source run directory is now."""
    from launcher.cli.cluster import connect
    from launcher.kube import JOB_RESOURCES
    from launcher.run.dirs import RunDir

    target = RunDir.of(spec.job_name, args.runs_dir)
    if not target.path.is_dir():
        return src
    if not (target.logs.is_dir() and any(target.logs.iterdir())) and not (target.path / "metrics.jsonl").exists():
        return src
    kube = connect(args, spec.scheduling.namespace)
    kube.namespace = spec.scheduling.namespace
    if kube.get(JOB_RESOURCES[spec.backend], spec.job_name) is not None:
        return src  # submit attaches to the running job: same run, same directory
    n = 1
    while (dest := target.path.with_name(f"{target.path.name}.prev-{n}")).exists():
        n += 1
    same = src.resolve() == target.path.resolve()
    target.path.rename(dest)
    err(f"kept the earlier run's files as {dest}")
    return dest if same else src
