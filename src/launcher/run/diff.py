"""`launcher diff RUN_A RUN_B`: what differs between two run directories, in spec, image and verl terms (pure).

- Spec: the resolved `spec.yaml`s, flattened to dotted keys (`rollout.n`); `name` is the run's
  identity and is shown in the header, not as a difference. Each differing key is mapped to the
  verl overrides it changes (`launcher.spec.verl`), found by changing only that key in A's spec.
- Image: the reference each spec names and the imageIDs its pods ran (`images.json`).
- verl config: the config verl printed at start (`verl_config.json`), flattened; keys that follow
  from the experiment name alone (`trainer.experiment_name`, the checkpoint directory) are marked.

Reads files only.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from launcher.run import provenance
from launcher.run.dirs import RunDir

IDENTITY_KEYS = ("name",)


def load_spec_dict(run: Path) -> dict:
    """A run directory's resolved spec as a dict (BadInput when it has none)."""
    from launcher.errors import BadInput

    p = RunDir(Path(run)).spec
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError:
        raise BadInput(f"{run}: expected a run directory with spec.yaml (what `submit` writes), found no {p}") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{p}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{p}: expected a mapping, got {type(data).__name__}")
    return data


def _changed(a: dict, b: dict) -> list[tuple[str, object, object]]:
    keys = sorted(set(a) | set(b))
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k, _MISSING) != b.get(k, _MISSING)]


_MISSING = object()


def _overrides(spec_dict: dict) -> tuple[str, dict[str, str]] | None:
    from launcher.spec.load import spec_from_raw
    from launcher.errors import BadInput
    from launcher.spec.verl import verl_overrides

    try:
        spec = spec_from_raw(copy.deepcopy(spec_dict), "<diff>")
    except BadInput:
        return None
    return spec.job_name, dict(o.split("=", 1) for o in verl_overrides(spec))


def _set_dotted(d: dict, key: str, value) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def verl_keys_for(spec_a: dict, key: str, value) -> list[str] | None:
    """The verl override keys that change when only `key` of `spec_a` becomes `value` (None: not computable).

    Overrides that differ only by the job name (any change moves the config hash, and with it the per-run
    checkpoint directory `trainer.default_local_dir`) follow from the run's identity and are left out."""
    first = _overrides(spec_a)
    changed = copy.deepcopy(spec_a)
    _set_dotted(changed, key, value)
    second = _overrides(changed)
    if first is None or second is None:
        return None
    (job_a, base), (job_b, other) = first, second

    def same_but_name(k: str) -> bool:
        va, vb = base.get(k), other.get(k)
        return va is not None and vb is not None and job_a != job_b and va.replace(job_a, "\0") == vb.replace(job_b, "\0")

    return [k for k in sorted(set(base) | set(other)) if base.get(k) != other.get(k) and (key == "name" or not same_but_name(k))]


def compare(run_a: Path, run_b: Path) -> dict:
    """The differences (shape: README "launcher diff")."""
    a, b = Path(run_a), Path(run_b)
    sa, sb = load_spec_dict(a), load_spec_dict(b)
    fa, fb = provenance.flatten(sa), provenance.flatten(sb)
    spec_diff = []
    for key, va, vb in _changed(fa, fb):
        if key in IDENTITY_KEYS:
            continue
        spec_diff.append({"key": key, "a": va, "b": vb, "verl": verl_keys_for(sa, key, vb)})
    name_keys = set(verl_keys_for(sa, "name", sb.get("name")) or []) if sa.get("name") != sb.get("name") else set()

    def images(run: Path, spec: dict) -> dict:
        ran = provenance.digests_by_image(provenance.load_json(RunDir(run).images))
        return {"reference": spec.get("image"), "ran": sorted(set().union(*ran.values())) if ran else [],
                "recorded": RunDir(run).images.exists()}

    ia, ib = images(a, sa), images(b, sb)
    ca = (provenance.load_json(RunDir(a).verl_config) or {}).get("config")
    cb = (provenance.load_json(RunDir(b).verl_config) or {}).get("config")
    verl_diff = None
    if isinstance(ca, dict) and isinstance(cb, dict):
        verl_diff = [{"key": k, "a": va, "b": vb, "from_name": k in name_keys}
                     for k, va, vb in _changed(provenance.flatten(ca), provenance.flatten(cb))]
    pa = provenance.load_json(RunDir(a).provenance) or {}
    pb = provenance.load_json(RunDir(b).provenance) or {}
    return {
        "a": {"run": str(a), "name": sa.get("name"), "launcher_version": pa.get("launcher_version")},
        "b": {"run": str(b), "name": sb.get("name"), "launcher_version": pb.get("launcher_version")},
        "spec": spec_diff,
        "image": {"a": ia, "b": ib, "same_reference": ia["reference"] == ib["reference"],
                  "same_ran": ia["ran"] == ib["ran"]},
        "verl_config": verl_diff,
        "verl_config_recorded": {"a": isinstance(ca, dict), "b": isinstance(cb, dict)},
    }


def render_text(d: dict) -> str:
    """The comparison as the lines `launcher diff` prints."""
    out = [f"--- A {d['a']['run']} (experiment {d['a']['name']}, launcher {d['a']['launcher_version'] or '?'})",
           f"+++ B {d['b']['run']} (experiment {d['b']['name']}, launcher {d['b']['launcher_version'] or '?'})"]
    out.append("spec:" if d["spec"] else "spec: no differences")
    for x in d["spec"]:
        verl = ", ".join(x["verl"]) if x["verl"] else ("none" if x["verl"] == [] else "?")
        out.append(f"  {x['key']}: {x['a']!r} -> {x['b']!r}   (verl: {verl})")
    ia, ib = d["image"]["a"], d["image"]["b"]
    if d["image"]["same_reference"] and d["image"]["same_ran"]:
        ran = ", ".join(ia["ran"]) or "not reported"
        out.append(f"image: same ({ia['reference']}; ran {ran})")
    else:
        out.append("image:")
        for tag, i in (("A", ia), ("B", ib)):
            ran = ", ".join(i["ran"]) or ("not reported by the nodes" if i["recorded"] else "not recorded")
            out.append(f"  {tag}: {i['reference']} (ran {ran})")
    rec = d["verl_config_recorded"]
    if d["verl_config"] is None:
        missing = [t for t in ("a", "b") if not rec[t]]
        out.append(f"verl config: not recorded in {' and '.join(m.upper() for m in missing)} "
                   "(captured from the log when the run is followed)")
    elif not d["verl_config"]:
        out.append("verl config: no differences")
    else:
        out.append("verl config:")
        for x in d["verl_config"]:
            note = "   (follows from the experiment name)" if x["from_name"] else ""
            out.append(f"  {x['key']}: {x['a']!r} -> {x['b']!r}{note}")
    return "\n".join(out) + "\n"
