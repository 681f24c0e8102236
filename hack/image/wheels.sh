#!/usr/bin/env bash
# The CPU image's wheelhouse, downloaded on the HOST: the build steps then install with --no-index, so
# the image never needs network access, this machine's proxy CA, or any credential.
#   hack/image/wheels.sh        -> prints the wheelhouse directory ($GRPO_CACHE/wheels/cpu-image-<hash>)
# Cached by the hash of its inputs (the pins and the scripts that turn them into files).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

PYTHON=${GRPO_WHEEL_PYTHON:-python3}
# The wheels must match the image's interpreter (bookworm: CPython 3.11, glibc 2.36, x86_64). pip picks
# files for the interpreter that runs it, so that interpreter must be a CPython 3.11 on linux x86_64.
"$PYTHON" -c 'import sys, platform; sys.exit(sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64")' \
  || { say "GRPO_WHEEL_PYTHON=$PYTHON is not CPython 3.11 on x86_64 (the image's Python)"; exit 2; }

# TORCH_INDEX_URL (optional): an index with CPU builds of torch 2.11.0, e.g.
# https://download.pytorch.org/whl/cpu (not reachable here). requirements/verl-test.txt's torch line and
# its nvidia-*/cuda-* dependencies are then replaced by that index's torch==2.11.0+cpu (no hashes: the
# CPU index's files are not in our locks).
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}

# The pins are committed (docker/verl-cpu/image-pins.txt, `make image-pins`): a build never resolves, it only downloads.
PINS="$ROOT/docker/verl-cpu/image-pins.txt"
"$PYTHON" "$HERE/pins.py" --check "$ROOT" "$PINS" || exit 2
key=$(cd "$ROOT" && { hash_inputs requirements/verl-test.txt docker/verl-cpu/image-pins.txt hack/image/wheels.sh; echo "$TORCH_INDEX_URL"; } \
  | sha256sum | cut -c1-16)
WH="$GRPO_CACHE/wheels/cpu-image-$key"
if [ -f "$WH/.complete" ]; then echo "$WH"; exit 0; fi
lock wheels
if [ -f "$WH/.complete" ]; then echo "$WH"; exit 0; fi

say "wheelhouse $WH: downloading requirements/verl-test.txt and docker/verl-cpu/image-pins.txt"
rm -rf "$WH.tmp" && mkdir -p "$WH.tmp"
# Seed it with the previous wheelhouse's files as hard links: pip download hash-checks and keeps the files it
# finds, so a changed pin costs one download, not 2.9 GB again. The older wheelhouses then go (each is 2.9 GB;
# five of them once filled this disk); a build using one holds hard links in its context, so nothing breaks.
prev=$(ls -1dt "$GRPO_CACHE"/wheels/cpu-image-*/.complete 2>/dev/null | head -1 || true)
if [ -n "$prev" ]; then cp -al "$(dirname "$prev")"/*.whl "$(dirname "$prev")"/*.tar.gz "$WH.tmp/" 2>/dev/null || true; fi
cp "$PINS" "$WH.tmp/image-pins.txt"
reqs="$ROOT/requirements/verl-test.txt"
if [ -n "$TORCH_INDEX_URL" ]; then
  # Drop torch and the CUDA wheels only it needs; the rest stays hash-checked.
  "$PYTHON" - "$reqs" "$WH.tmp/verl-test.txt" <<'PY'
import re, sys
skip = re.compile(r"^(torch|triton|nvidia-[a-z0-9-]+|cuda-[a-z-]+)==")
out, keep = [], True
for line in open(sys.argv[1]):
    if re.match(r"^[A-Za-z]", line):
        keep = not skip.match(line)
    if keep:
        out.append(line)
open(sys.argv[2], "w").writelines(out)
PY
  reqs="$WH.tmp/verl-test.txt"
  "$PYTHON" -m pip download --no-deps -q -d "$WH.tmp" --index-url "$TORCH_INDEX_URL" "torch==2.11.0+cpu"
else
  cp "$reqs" "$WH.tmp/verl-test.txt"
fi
# --no-deps: both files are complete closures; --require-hashes: every file is checked against the pins.
# --no-cache-dir: the wheelhouse is the cache (a changed pin reuses the seeded files above); pip's HTTP cache would
# hold a second 3 GB copy (and once returned a corrupt triton while another pip filled it). Files already in the
# directory are hash-checked and kept; one retry for a dropped connection.
dl() { "$PYTHON" -m pip download --no-deps --require-hashes --no-cache-dir -q -d "$WH.tmp" -r "$WH.tmp/verl-test.txt" -r "$WH.tmp/image-pins.txt"; }
dl || { say "pip download failed; retrying once"; dl; }
# Only the files the pins name stay (a dropped pin's seeded file would otherwise linger).
"$PYTHON" - "$WH.tmp" <<'PY'
import pathlib, re, sys
from pip._vendor.packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from pip._vendor.packaging.version import Version
d = pathlib.Path(sys.argv[1])
pin = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", re.M)
pins = {(canonicalize_name(m.group(1)), Version(m.group(2)))
        for f in ("verl-test.txt", "image-pins.txt") for m in pin.finditer((d / f).read_text())}
for f in list(d.glob("*.whl")) + list(d.glob("*.tar.gz")):
    name, ver = (parse_wheel_filename(f.name) if f.suffix == ".whl" else parse_sdist_filename(f.name))[:2]
    if (name, ver) not in pins:
        f.unlink()
PY
touch "$WH.tmp/.complete"
rm -rf "$WH" && mv "$WH.tmp" "$WH"
for old in "$GRPO_CACHE"/wheels/cpu-image-*; do
  [ "$old" = "$WH" ] || rm -rf "$old"
done
say "wheelhouse: $(find "$WH" -maxdepth 1 -type f -name '*.*' | wc -l) files, $(du -sh "$WH" | cut -f1)"
echo "$WH"
