"""Checks on docker/requirements.lock (run by `make lock-check`; standard library + `packaging` only).

    check_lock.py LOCK PYPROJECT REQUIREMENTS_IN
        every dependency of the project (pyproject.toml) and of docker/requirements.in is pinned in
        the lock by a version its specifier accepts; the pins verl 0.9.1's vllm extra names exactly
        (torch, vllm, transformers, ...) and the transfer_queue trap's packages are present.
    check_lock.py --pins LOCK [EXCLUDE...]
        print the lock as plain `name==version` constraints, without the EXCLUDE'd names (for
        resolving the CPU test environment, requirements/verl-test.txt, against the image's versions).
    check_lock.py --report REPORT LOCK
        pip's installation report (`pip install --dry-run --report`) selects exactly the lock's pins:
        nothing missing, nothing extra, every file a CPython 3.12 / linux x86_64 compatible wheel.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# verl 0.9.1's METADATA, extra "vllm" (exact pins), plus the two packages whose absence is the
# transfer_queue trap (shared notes, verl.md §0.1).
EXPECTED = {
    "verl": "0.9.1",
    "torch": "2.11.0",
    "torchvision": "0.26.0",
    "torchaudio": "2.11.0",
    "vllm": "0.24.0",
    "transformers": "5.9.0",
}
REQUIRED = ("transferqueue", "cachetools", "einops", "setuptools", "wheel")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def read_pins(lock: Path) -> dict[str, str]:
    """Canonical name → pinned version, from a pip/uv requirements file with `name==version` lines."""
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        m = _PIN.match(line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(3)
    return pins


def _requirements_in(path: Path) -> list[Requirement]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(Requirement(line))
    return out


def check_inputs(lock: Path, pyproject: Path, req_in: Path) -> list[str]:
    """Problems with the lock's coverage of its inputs (empty when fine)."""
    pins = read_pins(lock)
    reqs = [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    reqs += _requirements_in(req_in)
    problems = []
    for req in reqs:
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req}: not pinned in {lock}")
        elif not req.specifier.contains(Version(pins[name]), prereleases=True):
            problems.append(f"{req}: lock pins {pins[name]}")
    for name, version in EXPECTED.items():
        if pins.get(name) != version:
            problems.append(f"{name}: verl 0.9.1[vllm] needs =={version}, lock has {pins.get(name)}")
    for name in REQUIRED:
        if name not in pins:
            problems.append(f"{name}: missing from {lock}")
    if "flash-attn" in pins:
        problems.append("flash-attn: must not be in the lock (the Dockerfile supplies the cu130 build)")
    if not problems:
        print(f"{lock}: {len(pins)} pins; all {len(reqs)} input requirements pinned within their specifiers")
    return problems


def _wheel_ok(filename: str) -> bool:
    """A wheel this image can install: CPython 3.12 (or abi3 / pure), linux x86_64 (or any platform)."""
    if not filename.endswith(".whl"):
        return False
    _, _, rest = filename[:-4].partition("-")
    tags = rest.split("-")[-3:]
    py, abi, plat = tags
    py_ok = any(p in ("cp312", "py3", "py2.py3") or p.startswith("py3") for p in py.split(".")) or (
        abi == "abi3" and any(p.startswith("cp3") and int(p[3:] or 0) <= 12 for p in py.split("."))
    )
    plat_ok = any(p == "any" or (p.startswith("manylinux") and p.endswith("x86_64")) for p in plat.split("."))
    return py_ok and plat_ok


def check_report(report: Path, lock: Path) -> list[str]:
    """Problems with pip's selection against the lock (empty when it selected exactly the lock)."""
    pins = read_pins(lock)
    data = json.loads(report.read_text())
    chosen: dict[str, str] = {}
    problems = []
    for item in data["install"]:
        meta = item["metadata"]
        name = canonicalize_name(meta["name"])
        chosen[name] = meta["version"]
        url = item["download_info"]["url"]
        if not _wheel_ok(url.rsplit("/", 1)[-1]):
            problems.append(f"{name}: {url} is not a cp312 linux x86_64 wheel")
    for name in sorted(pins.keys() | chosen.keys()):
        if pins.get(name) != chosen.get(name):
            problems.append(f"{name}: lock {pins.get(name)} vs pip {chosen.get(name)}")
    if not problems:
        print(f"pip {data.get('pip_version')} resolved {len(chosen)} packages = the {len(pins)} pins of {lock}, "
              f"all cp312/linux-x86_64 wheels")
    return problems


def main(argv: list[str]) -> int:
    """Command line: see the module docstring. Exit 1 and list the problems when there are any."""
    if argv[:1] == ["--pins"]:
        exclude = {canonicalize_name(n) for n in argv[2:]}
        for name, version in sorted(read_pins(Path(argv[1])).items()):
            if name not in exclude:
                print(f"{name}=={version}")
        return 0
    if argv[:1] == ["--report"]:
        problems = check_report(Path(argv[1]), Path(argv[2]))
    else:
        problems = check_inputs(Path(argv[0]), Path(argv[1]), Path(argv[2]))
    for p in problems:
        print(f"lock-check: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
