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
        nothing missing, nothing extra, every file a wheel the image (CPython 3.12, linux x86_64,
        glibc 2.39) can install, or the sdist of an allow-listed pure-Python package.
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


def read_hashes(lock: Path) -> dict[str, set[str]]:
    """Canonical name → the sha256 hashes the lock allows for it."""
    out: dict[str, set[str]] = {}
    current = None
    for line in lock.read_text().splitlines():
        m = _PIN.match(line)
        if m:
            current = canonicalize_name(m.group(1))
            out[current] = set()
        for h in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            if current is not None:
                out[current].add(h)
    return out


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


# Pure-Python packages that exist only as an sdist at the pinned version (pip builds them in the image).
SDIST_OK = {"antlr4-python3-runtime"}  # 4.9.3, pinned by omegaconf 2.3 (antlr4-python3-runtime==4.9.*)
MAX_GLIBC = (2, 39)  # Ubuntu 24.04, the image's base
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_x86_64$")
_LEGACY = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}


def _platform_ok(tag: str) -> bool:
    if tag == "any":
        return True
    m = _MANYLINUX.match(tag)
    glibc = (int(m.group(1)), int(m.group(2))) if m else _LEGACY.get(tag)
    return glibc is not None and glibc <= MAX_GLIBC


def _file_ok(name: str, filename: str) -> bool:
    """A file this image can install: a wheel for CPython 3.12 (cp312, abi3 or pure) on linux x86_64
    with glibc <= 2.39, or the sdist of an allow-listed pure-Python package."""
    if not filename.endswith(".whl"):
        return name in SDIST_OK and filename.endswith((".tar.gz", ".zip"))
    py, abi, plat = filename[:-4].split("-")[-3:]
    py_ok = any(p in ("cp312", "py3", "py2.py3") or p.startswith("py3") for p in py.split(".")) or (
        abi == "abi3" and any(p.startswith("cp3") and int(p[3:] or 0) <= 12 for p in py.split("."))
    )
    return py_ok and any(_platform_ok(p) for p in plat.split("."))


def check_report(report: Path, lock: Path) -> list[str]:
    """Problems with pip's selection against the lock (empty when it selected exactly the lock)."""
    pins, hashes = read_pins(lock), read_hashes(lock)
    data = json.loads(report.read_text())
    chosen: dict[str, str] = {}
    problems = []
    for item in data["install"]:
        meta = item["metadata"]
        name = canonicalize_name(meta["name"])
        chosen[name] = meta["version"]
        url = item["download_info"]["url"]
        sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if sha not in hashes.get(name, set()):
            problems.append(f"{name}: pip chose {url} (sha256 {sha}), not a file the lock's hashes allow")
        if item.get("is_yanked"):
            problems.append(f"{name}: {meta['version']} is yanked")
        if not _file_ok(name, url.rsplit("/", 1)[-1]):
            problems.append(f"{name}: {url} is not a cp312 linux x86_64 (glibc <= 2.39) wheel")
    for name in sorted(pins.keys() | chosen.keys()):
        if pins.get(name) != chosen.get(name):
            problems.append(f"{name}: lock {pins.get(name)} vs pip {chosen.get(name)}")
    if not problems:
        print(f"pip {data.get('pip_version')} resolved {len(chosen)} packages = the {len(pins)} pins of {lock} "
              "(each file's index sha256 among the lock's hashes, none yanked), "
              f"all cp312 linux x86_64 (glibc <= 2.39) wheels except the sdists of {sorted(SDIST_OK)}")
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
