"""Arguments several verbs share, declared once."""

from __future__ import annotations

import argparse


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """CONFIG plus `--backend` and repeatable `--set KEY=VALUE`."""
    parser.add_argument("config", metavar="CONFIG", help="experiment config (YAML), e.g. configs/grpo-exp3.yaml")
    parser.add_argument("--backend", choices=["pytorchjob", "rayjob"], help="override the config's backend")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set rollout.n=4 (repeatable)",
    )


def load_from_args(args: argparse.Namespace):
    """The validated spec for CONFIG/--set/--backend (raises BadInput, exit 2)."""
    from launcher.config import load_spec

    return load_spec(args.config, args.sets, args.backend)
