"""`launcher schema`: the experiment config's JSON schema (also the chart's values.schema.json)."""

from __future__ import annotations

import argparse
import json

HELP = "print the JSON schema of experiment configs (--docs: a field reference in Markdown)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--docs", action="store_true", help="print a Markdown table of every field instead")


def run(args: argparse.Namespace) -> int:
    from launcher.spec.model import ExperimentSpec, field_docs

    if args.docs:
        print("| field | description |\n|---|---|")
        for path, doc in field_docs().items():
            print(f"| `{path}` | {doc} |")
        return 0
    print(json.dumps(ExperimentSpec.model_json_schema(), indent=2, sort_keys=True))
    return 0
