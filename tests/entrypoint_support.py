"""A spec file for running the real entrypoint in tests: exp3, with stand-in data already prepared."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def standin_config(tmp: Path, nodes: int = 1) -> Path:
    """exp3 with `nodes`, data/checkpoints/cache under `tmp`; the parquet files exist, so data prep skips."""
    data = tmp / "data"
    data.mkdir(exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"stand-in")
    raw = yaml.safe_load((REPO / "configs" / "grpo-exp3.yaml").read_text())
    raw["resources"]["nodes"] = nodes
    raw["data"]["dir"] = str(data)
    raw["trainer"]["checkpoint_dir"] = str(tmp / "ckpt")
    raw["model"]["cache_dir"] = str(tmp / "hf")
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
