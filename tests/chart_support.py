"""Shared helpers for the chart tests: render with helm or the launcher, normalise, compare.

Both sides are compared as parsed objects keyed by (kind, name), after removing only Helm's own
bookkeeping labels (labels.HELM_BOOKKEEPING) from every `labels` map, so every other byte of every
field (the ConfigMap's spec.yaml text included) must agree.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from helm_tools import CHART, ROOT, ToolMissing, helm, tool
from launcher.spec.load import load_spec
from launcher.spec.names import HELM_BOOKKEEPING
from launcher.render.manifests import render

_spec = importlib.util.spec_from_file_location("gen_chart", ROOT / "hack" / "gen_chart.py")
gen_chart = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("gen_chart", gen_chart)
_spec.loader.exec_module(gen_chart)


def require_helm() -> str:
    """Path of the real helm; fails the test (not skips) with the `make tools` hint when absent."""
    try:
        return tool("helm")
    except ToolMissing as exc:
        pytest.fail(str(exc))


def helm_objects(*args: str, namespace: str = "default", tests: bool = False, flatten: bool = True) -> list[dict]:
    """`helm template` of the chart with extra args, parsed (empty documents dropped).

    Without `tests`, the `helm test` hooks (templates/tests/) are left out (`--skip-tests`): they are not
    part of the release's objects, which is what the launcher renders. With `flatten` (the default) a v1
    List (the trainjob backend's TrainingRuntime + TrainJob) is replaced by its items, in order, as Helm
    and kubectl do before they send anything to the API server.
    """
    require_helm()
    skip = [] if tests else ["--skip-tests"]
    out = helm("template", "grpo-exp3", str(CHART), "--namespace", namespace, *skip, *args).stdout
    docs = [o for o in yaml.safe_load_all(out) if o]
    return flatten_lists(docs) if flatten else docs


def flatten_lists(docs: list[dict]) -> list[dict]:
    """Every `v1 List` replaced by its items, in order (kubectl's and Helm's resource builder `Flatten`)."""
    out = []
    for doc in docs:
        if doc.get("apiVersion") == "v1" and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def helm_error(*args: str, namespace: str = "default") -> str:
    """stderr of a `helm template` that must fail."""
    require_helm()
    proc = helm("template", "grpo-exp3", str(CHART), "--namespace", namespace, *args, check=False)
    assert proc.returncode != 0, f"helm template {' '.join(args)} unexpectedly succeeded:\n{proc.stdout[:2000]}"
    return proc.stderr


def strip_bookkeeping(obj):
    """Remove HELM_BOOKKEEPING keys from every `labels` mapping, in place; returns obj."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "labels" and isinstance(value, dict):
                for label in HELM_BOOKKEEPING:
                    value.pop(label, None)
            else:
                strip_bookkeeping(value)
    elif isinstance(obj, list):
        for item in obj:
            strip_bookkeeping(item)
    return obj


def by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    out = {}
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in out, f"duplicate object {key}"
        out[key] = strip_bookkeeping(obj)
    return out


def values_file(tmp_path: Path, config: Path, sets=(), backend=None) -> Path:
    """The chart values for CONFIG, written the way `hack/gen_chart.py values` writes them."""
    values = gen_chart.values_for_config(config, list(sets), backend)
    path = tmp_path / f"values-{config.stem}-{backend or 'default'}.yaml"
    path.write_text(gen_chart.values_text(values, str(config)))
    return path


def launcher_objects(config: Path, sets=(), backend=None) -> list[dict]:
    # Round-trip through JSON so both sides hold plain parsed types (as after YAML parsing).
    return json.loads(json.dumps(render(load_spec(config, list(sets), backend))))


def launcher_eval_objects(config: Path, baseline: bool, checkpoint: str | None, sets=(), backend=None) -> list[dict]:
    """What `launcher eval CONFIG [--baseline] [--checkpoint X]` renders (commands.eval.plan's render call)."""
    from launcher.cli.commands import eval as E
    from launcher.spec.names import eval_job_name

    spec = load_spec(config, list(sets), backend)
    name = eval_job_name(spec, E.models_key(baseline, checkpoint))
    objects = render(spec, component="eval", entry_args=E.entry_args(baseline, checkpoint), instance=name)
    return json.loads(json.dumps(objects))


def assert_same_objects(launcher: list[dict], chart: list[dict]) -> None:
    left, right = by_key(launcher), by_key(chart)
    assert sorted(left) == sorted(right), "the two renderers produce different object sets"
    for key in left:
        if left[key] != right[key]:
            a = json.dumps(left[key], indent=1, sort_keys=True).splitlines()
            b = json.dumps(right[key], indent=1, sort_keys=True).splitlines()
            import difflib

            diff = "\n".join(list(difflib.unified_diff(a, b, "launcher", "helm", lineterm=""))[:80])
            raise AssertionError(f"{key} differs between launcher render and helm template:\n{diff}")


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())
