#!/usr/bin/env bash
# `make image-cpu`: the CPU image (docker/Dockerfile.cpu) as an OCI image layout directory at
# $GRPO_CACHE/images/verl-grpo-cpu.oci, built with buildah from a local Debian base and a host wheelhouse.
# Warm path: when the hash of every input equals the stamp next to the layout, nothing runs (not even buildah).
# A change under src/ reruns only the launcher's steps (buildah's layer cache) and writes only their layers.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

# Everything that can change the image (import.sh and ctr-smoke.sh do not). REVISION/CREATED labels are deliberately not inputs: a new commit
# that changes none of these files keeps the image (its revision label is the commit it was built at).
INPUTS=(docker/Dockerfile.cpu requirements/verl-test.txt docker/requirements.lock docker/check_lock.py
        pyproject.toml README.md src tests/fixtures/gsm8k/README.md tests/fixtures/gsm8k/main
        docker/verl-cpu/grpo_verl_cpu docker/verl-cpu/vllm_dist_stub.py docker/verl-cpu/image-pins.txt
        hack/image/common.sh hack/image/base.sh hack/image/wheels.sh hack/image/build.sh)
inputs=$( { hash_inputs "${INPUTS[@]}"; echo "$IMAGE_REF ${TORCH_INDEX_URL:-}"; } | sha256sum | cut -c1-64)
if [ -f "$LAYOUT/index.json" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$inputs" ]; then
  say "up to date: $LAYOUT ($IMAGE_REF)"
  echo "$LAYOUT"; exit 0
fi

# Another build may hold the lock and produce exactly this image: check again once we have it.
lock build
if [ -f "$LAYOUT/index.json" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$inputs" ]; then
  say "up to date (built meanwhile): $LAYOUT"; echo "$LAYOUT"; exit 0
fi
# We hold the build lock, so any other context is left from a killed build (an EXIT trap does not run on SIGKILL).
rm -rf "$IMAGE_CACHE"/context.*
# buildah and skopeo stage whole layers in $TMPDIR (default /var/tmp): here, and cleared for the same reason
# (a killed build once left 12 GB in /var/tmp).
export TMPDIR="$IMAGE_CACHE/tmp"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
write_buildah_config
buildah rm --all >/dev/null 2>&1 || true  # working containers of a killed build (one held a 5 GB layer)

# The base (mmdebstrap: Debian's packages) and the wheelhouse (PyPI's wheels) at once: both mostly download, from
# different servers (a cold build: 164 s and 228 s one after the other).
t0=$SECONDS
"$HERE/wheels.sh" > "$TMPDIR/wheelhouse.path" & wheels_pid=$!
base=$("$HERE/base.sh") || { kill "$wheels_pid" 2>/dev/null; exit 1; }
say "base $base ($((SECONDS - t0)) s)"
wait "$wheels_pid" || { say "wheelhouse failed"; exit 1; }
wheels=$(tail -1 "$TMPDIR/wheelhouse.path")
say "wheelhouse $wheels ($((SECONDS - t0)) s, beside the base)"

# The build context: exactly the files the Dockerfile copies, plus the wheelhouse as hard links (same file
# system, so no copy of its 3 GB). The repository's .dockerignore is for docker/Dockerfile and is not used.
ctx=$(mktemp -d "$IMAGE_CACHE/context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/tests/fixtures/gsm8k"
(cd "$ROOT" && cp -r pyproject.toml README.md src "$ctx/" \
  && cp -r tests/fixtures/gsm8k/README.md tests/fixtures/gsm8k/main "$ctx/tests/fixtures/gsm8k/")
mkdir -p "$ctx/verl-cpu" && cp -r "$ROOT/docker/verl-cpu/grpo_verl_cpu" "$ctx/verl-cpu/"
python3 "$ROOT/docker/verl-cpu/vllm_dist_stub.py" "$ctx" >/dev/null   # vllm-0.24.0+cpu-py3-none-any.whl, same bytes every time
(cd "$ctx" && sha256sum vllm-*.whl >vllm-stub.sha256)   # the layer cache key of its bind-mounted install
find "$ctx/src" "$ctx/verl-cpu" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
cp -al "$wheels" "$ctx/wheels" 2>/dev/null || cp -a "$wheels" "$ctx/wheels"
# What the wheelhouse holds, as a file the Dockerfile COPYs: buildah's cache keys on COPY content, not on the
# bind-mounted wheelhouse. Kept in the image as provenance (/opt/grpo-launcher/wheelhouse.txt).
{ echo "# $(basename "$wheels")"; (cd "$wheels" && sha256sum verl-test.txt image-pins.txt && ls -1 -- *.whl *.tar.gz); } \
  >"$ctx/wheelhouse.txt"

t2=$SECONDS
# --layers: a change to src/ only reruns the small steps after the pip layer.
# Uncompressed layers (buildah's default in local storage, and in the layout below): gzip of the 6 GB venv
# layer costs minutes on 2 cores for an image that only travels to a local containerd.
buildah bud --signature-policy "$POLICY" --layers --isolation "$BUILDAH_ISOLATION" \
  -f "$ROOT/docker/Dockerfile.cpu" -t "$IMAGE_REF" \
  --build-arg BASE_IMAGE="$base" \
  --label org.opencontainers.image.revision="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
  --label org.opencontainers.image.created="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$ctx" >&2
say "buildah bud ($((SECONDS - t2)) s)"

t3=$SECONDS
# The layout keeps the blobs it has: skopeo reuses them, so only new layers are written (no $TMPDIR staging either).
# A cold write is the whole image once: say so before writing 7 GB rather than die half-way.
need_gb=${GRPO_IMAGE_MIN_FREE_GB:-9}
[ -f "$LAYOUT/index.json" ] && need_gb=${GRPO_IMAGE_MIN_FREE_GB:-1}
free_gb=$(( $(df --output=avail -k "$IMAGE_CACHE" | tail -1) / 1024 / 1024 ))
[ "$free_gb" -ge "$need_gb" ] || {
  say "not enough disk for the image: $free_gb GiB free in $IMAGE_CACHE, $need_gb GiB needed (GRPO_IMAGE_MIN_FREE_GB)"; exit 1; }
rm -f "$STAMP" "$ARCHIVE_OLD" "$ARCHIVE_OLD.inputs"   # the tar archive of earlier versions of this script
trap 'rm -rf "$ctx" "$TMPDIR"' EXIT
# skopeo, not `buildah push --disable-compression`: buildah 1.28 still gzips layers (measured: the 184 MB base came
# out as a 65 MB tar+gzip layer); skopeo's --dest-oci-accept-uncompressed-layers keeps them. skopeo replaces the
# index entry of the same name; layout.py prune then drops the superseded image's blobs.
skopeo copy --quiet --policy "$POLICY" --dest-oci-accept-uncompressed-layers \
  "containers-storage:$IMAGE_REF" "oci:$LAYOUT:$IMAGE_REF" >&2
python3 "$HERE/layout.py" prune "$LAYOUT"
echo "$inputs" >"$STAMP"
say "image layout $LAYOUT: $(du -sh "$LAYOUT" | cut -f1) ($((SECONDS - t3)) s write; $((SECONDS - t0)) s total)"
# Dangling intermediate images of earlier builds (the layer cache keeps the current ones).
buildah rmi --prune >/dev/null 2>&1 || true
echo "$LAYOUT"
