"""The compiled templates (`launcher/_templates_compiled.py`) are the Jinja templates, exactly.

`render` runs the Python that `launcher.template_compile` generates from templates/*.j2; these tests fail
when that module is stale, and render every golden config and a few unusual ones through both the
compiled functions and Jinja itself, requiring the same text for every object.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher import render as R
from launcher import template_compile
from launcher._templates_compiled import TEMPLATES
from launcher.config import load_spec, load_spec_view

ROOT = Path(__file__).resolve().parents[1]
CASES = [(exp, backend) for exp in ("grpo-exp3", "grpo-exp4", "smoke-cpu") for backend in ("pytorchjob", "rayjob",
                                                                                              "trainjob")]
UNUSUAL = [
    "scheduling.queue=team-a", "storage.create=true", "storage.claim_name=data", "storage.storage_class=fast",
    "storage.access_mode=ReadWriteMany", "resources.nodes=2", "run_policy.active_deadline_seconds=60",
    "run_policy.ttl_seconds_after_finished=30", "scheduling.priority_class=high", "scheduling.service_account=sa",
    "scheduling.tolerations[0].key=pool", "secrets.image_pull_secrets=[regcred]", "network.nccl_ib=true",
    "scheduling.pod_annotations={note: \"a\\nb\"}",
]


def test_compiled_templates_are_not_stale():
    assert template_compile.OUT_PATH.read_text() == template_compile.compile_templates(), (
        f"src/launcher/_templates_compiled.py is stale: run `{template_compile.REGEN}` (or `make chart`) and commit it")


def test_every_template_is_compiled():
    shown = {p.name for p in template_compile.TEMPLATE_DIR.glob("*.j2") if not p.name.startswith("_")}
    assert set(TEMPLATES) == shown


def _calls(spec, **kwargs) -> list[tuple[str, dict]]:
    calls = []
    original = R._render_template

    def spy(template, **context):
        calls.append((template, context))
        return original(template, **context)

    R._render_template = spy
    try:
        R.render(spec, **kwargs)
    finally:
        R._render_template = original
    return calls


@pytest.mark.parametrize("exp,backend", CASES)
@pytest.mark.parametrize("sets", [[], UNUSUAL], ids=["plain", "unusual"])
def test_compiled_text_is_jinjas(exp, backend, sets):
    config = ROOT / "configs" / f"{exp}.yaml"
    # the smoke config with the extras: GPU pods need CPUs enough for a GPU each (a quoted quantity: a string)
    sets = [*sets, *(["resources.gpus_per_node=2", 'resources.cpu="2"'] if exp == "smoke-cpu" and sets else [])]
    spec = load_spec(config, sets, backend)
    for kwargs in ({}, {"gitops": True, "start_over": "T1", "entry_args": ("--x", "y z")}):
        calls = _calls(spec, **kwargs)
        assert calls
        for template, context in calls:
            assert TEMPLATES[template](context, R.FILTERS) == template_compile.render_with_jinja(template, **context)


def test_render_is_the_same_from_a_view_and_from_the_model():
    config = ROOT / "configs" / "grpo-exp4.yaml"
    for backend in ("pytorchjob", "rayjob", "trainjob"):
        view, model = load_spec_view(config, UNUSUAL, backend), load_spec(config, UNUSUAL, backend)
        assert type(view).__name__ == "ExperimentSpecView"
        assert R.to_yaml(R.render(view)) == R.to_yaml(R.render(model))


def test_the_compiler_refuses_what_it_does_not_translate(tmp_path, monkeypatch):
    (tmp_path / "bad.yaml.j2").write_text("{% for x in items %}{{ x }}{% endfor %}\n")
    monkeypatch.setattr(template_compile, "TEMPLATE_DIR", tmp_path)
    with pytest.raises(template_compile.Unsupported, match="bad.yaml.j2:1: For"):
        template_compile.compile_templates()
    (tmp_path / "bad.yaml.j2").write_text("{{ x | upper }}\n")
    with pytest.raises(template_compile.Unsupported, match="filter 'upper'"):
        template_compile.compile_templates()
