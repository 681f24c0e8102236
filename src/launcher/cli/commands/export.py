"""`launcher export RUN_DIR --mlflow URI | --tensorboard DIR`: a run directory into experiment trackers."""

from __future__ import annotations

import argparse

HELP = "write a run's metrics, config and summary figures to MLflow and/or TensorBoard (idempotent)"
DESCRIPTION = (
    "Reads RUN_DIR (a run directory, or a job name under the runs directory): every step of metrics.jsonl, the "
    "config (spec.yaml) as params, the report's summary figures. --mlflow URI writes them with MLflow's client to "
    "the run tagged grpo.launcher.io/job=<job> in the experiment (created when absent); --tensorboard DIR writes "
    "event files under DIR/<job>/. Only what is not there yet is sent: a second export adds nothing. Needs no "
    "cluster, so it works where the pods cannot reach the tracking server."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from launcher.export.targets import add_export_arguments

    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory (runs/<job>) or job name")
    add_export_arguments(parser, live=False)
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    import json

    from launcher.errors import BadInput
    from launcher.export import load_run_data
    from launcher.export.targets import check_export_arguments, open_exporters, wants_export

    check_export_arguments(args)
    if not wants_export(args):
        raise BadInput("export: expected --mlflow URI and/or --tensorboard DIR, got neither")
    data = load_run_data(args.run_dir)
    out: dict = {"run": data.job, "steps": len(data.rows)}
    for name, exporter in open_exporters(mlflow=args.mlflow, mlflow_experiment=args.mlflow_experiment,
                                         tensorboard=args.tensorboard).items():
        result = exporter.export(data)
        if name == "mlflow":
            out["mlflow"] = {"uri": args.mlflow, "run_id": result.run_id, "created": result.created,
                             "metrics": result.metrics, "params": result.params, "tags": result.tags}
        else:
            exporter.close()
            out["tensorboard"] = {"dir": str(result.log_dir), "scalars": result.scalars, "texts": result.texts}
    if args.output == "json":
        print(json.dumps(out, indent=2))
        return 0
    if "mlflow" in out:
        m = out["mlflow"]
        print(f"mlflow: run {m['run_id']}{' (new)' if m['created'] else ''} at {m['uri']}: "
              f"{m['metrics']} metric value(s), {m['params']} param(s), {m['tags']} tag(s) sent")
    if "tensorboard" in out:
        t = out["tensorboard"]
        print(f"tensorboard: {t['dir']}: {t['scalars']} scalar(s), {t['texts']} text(s) written")
    return 0
