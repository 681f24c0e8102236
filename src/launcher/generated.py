"""The command line shared by the generators of committed modules (`launcher.spec_plan`, `launcher.template_compile`).

A generated module is committed so that a render imports neither pydantic nor jinja2; its generator writes it, or,
with `--check`, exits 1 when the committed file differs from what the sources give now (make chart / chart-check,
hack/gen_chart.py, run both)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable


def generator_main(argv: list[str] | None, *, description: str, path: Path, text: Callable[[], str], sources: str,
                   regen: str) -> int:
    """Write `text()` to `path`, or with --check return 1 (naming `sources` and `regen`) when `path` is stale."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if the committed {path.name} is stale")
    args = parser.parse_args(argv)
    if args.check:
        if not path.exists() or path.read_text() != text():
            print(f"STALE: {path} differs from {sources}; run `{regen}` and commit it", file=sys.stderr)
            return 1
        return 0
    path.write_text(text())
    print(f"wrote {path}")
    return 0
