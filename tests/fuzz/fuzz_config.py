"""atheris target: config loading, validation and rendering never crash.

Run: python tests/fuzz/fuzz_config.py -runs=10000 -seed=1 tests/fuzz/corpus_config
Every input must either be refused with `BadInput` (a clear one-line-per-problem message) or
validate, render, and parse back to the same objects.
"""

import sys

import atheris

with atheris.instrument_imports():
    import yaml

    from launcher.spec.load import apply_sets, parse_yaml_text, spec_from_raw
    from launcher.errors import BadInput
    from launcher.render.manifests import render, to_yaml


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    try:
        raw = parse_yaml_text(text, "fuzz")
        if not isinstance(raw, dict):
            raise BadInput("not a mapping")
        raw.setdefault("name", "fuzz")
        raw = apply_sets(raw, [])
        spec = spec_from_raw(raw, "fuzz")
    except BadInput as exc:
        if not str(exc):
            raise AssertionError("empty error message") from None
        return
    objects = render(spec)
    if list(yaml.safe_load_all(to_yaml(objects))) != objects:
        raise AssertionError("rendered YAML does not round-trip")


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()  # libFuzzer prints 'Done N runs' and exits non-zero on any crash


if __name__ == "__main__":
    main()
