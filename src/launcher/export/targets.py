"""The `--mlflow URI` / `--tensorboard DIR` flags, shared by `export`, `submit --follow` and `logs --follow`."""

from __future__ import annotations

import argparse
import os
import re

from launcher.errors import BadInput

# What MLflow's client accepts as a tracking URI: a server (http/https), a local store (file:, sqlite:,
# postgresql:, ...) or databricks. A URL with user:password@ would put a credential in shell history
# and process lists: MLflow reads MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN from the environment instead.
_URI = re.compile(r"^([a-z][a-z0-9+.-]*):\S+$|^databricks$")


def add_export_arguments(parser: argparse.ArgumentParser, *, live: bool) -> None:
    what = "as steps arrive, " if live else ""
    parser.add_argument("--mlflow", metavar="URI",
                        help=f"also write every step of metrics.jsonl to this MLflow tracking server/store, {what}"
                             "with the config as params and the report's summary figures (idempotent)")
    parser.add_argument("--mlflow-experiment", metavar="NAME",
                        help="MLflow experiment for --mlflow (default: the config's trainer.project_name)")
    parser.add_argument("--tensorboard", metavar="DIR",
                        help=f"also write TensorBoard event files to DIR/<job>/, {what}(idempotent)")


def check_export_arguments(args: argparse.Namespace) -> None:
    """Bad flags are bad input (exit 2), before any cluster or tracking call."""
    uri = getattr(args, "mlflow", None)
    if uri is not None:
        if not _URI.match(uri):
            raise BadInput(f"--mlflow: expected a tracking URI such as http://host:5000 or sqlite:///path.db, got {uri!r}")
        if re.match(r"^https?://[^/@\s]*@", uri):
            raise BadInput("--mlflow: expected a URI without user:password@ (set MLFLOW_TRACKING_USERNAME/"
                           "MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN instead), got a URI with credentials")
        if uri.startswith("file:") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("true", "1"):
            # MLflow 3.x refuses its file store with a paragraph-long exception; say it in one line, before any call.
            raise BadInput(f"--mlflow: expected a database or server tracking URI such as sqlite:///mlflow.db or "
                           f"http://host:5000, got {uri!r} (MLflow refuses its file store unless "
                           "MLFLOW_ALLOW_FILE_STORE=true is set)")
    if getattr(args, "mlflow_experiment", None) is not None and uri is None:
        raise BadInput("--mlflow-experiment: expected --mlflow URI with it, got no --mlflow")
    for name, module in (("mlflow", "mlflow"), ("tensorboard", "tensorboard")):
        if getattr(args, name, None) is not None:
            import importlib.util

            if importlib.util.find_spec(module) is None:
                raise BadInput(f"--{name}: expected the {module} package to be installed "
                               f"(pip install 'grpo-launcher[tracking]'), got none")


def wants_export(args: argparse.Namespace) -> bool:
    return getattr(args, "mlflow", None) is not None or getattr(args, "tensorboard", None) is not None


def open_exporters(*, mlflow: str | None, mlflow_experiment: str | None, tensorboard: str | None) -> dict:
    """{"mlflow": MlflowExporter, "tensorboard": TensorBoardExporter} for the flags given."""
    out: dict = {}
    if mlflow is not None:
        from launcher.export.mlflow_export import MlflowExporter

        out["mlflow"] = MlflowExporter(mlflow, mlflow_experiment)
    if tensorboard is not None:
        from launcher.export.tensorboard_export import TensorBoardExporter

        out["tensorboard"] = TensorBoardExporter(tensorboard)
    return out
