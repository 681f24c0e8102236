# Shared settings for hack/image/*.sh (sourced). See docker/README.md, "CPU image for the local cluster".
HERE=${HERE:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
ROOT=$(cd "$HERE/../.." && pwd)

GRPO_CACHE=${GRPO_CACHE:-$HOME/.cache/grpo-launcher}
IMAGE_CACHE="$GRPO_CACHE/images"
IMAGE_REF=${GRPO_CPU_IMAGE:-ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu}
LAYOUT="$IMAGE_CACHE/verl-grpo-cpu.oci"     # an OCI image layout directory (layout.py says why not a tar)
STAMP="$LAYOUT.inputs"                      # sha256 of every input; equal => nothing to do
ARCHIVE_OLD="$IMAGE_CACHE/verl-grpo-cpu.oci.tar"  # what earlier versions wrote instead (removed by build.sh)

# Debian base: bookworm has Python 3.11 (verl 0.9.1 wants < 3.13; no Debian suite has 3.12).
SUITE=${GRPO_BASE_SUITE:-bookworm}
MIRROR=${GRPO_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${GRPO_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# python3-venv: the image's /opt/venv; tini: PID 1 (ENTRYPOINT); ca-certificates: Debian's own bundle for
# HTTPS from the pods (HF hub); procps + iproute2: ps/ip when debugging a pod (about 3 MB).
# libnuma1: vLLM CPU's own kernels (vllm/_C.abi3.so) link libnuma.so.1; without it the engine core does not start.
BASE_PACKAGES=${GRPO_BASE_PACKAGES:-python3,python3-venv,tini,ca-certificates,procps,iproute2,libnuma1}

# buildah: private storage and config under the cache, never /etc/containers or /var/lib/containers.
BUILDAH_DIR="$GRPO_CACHE/buildah"
export CONTAINERS_STORAGE_CONF="$BUILDAH_DIR/storage.conf"
export CONTAINERS_CONF="$BUILDAH_DIR/containers.conf"
export CONTAINERS_REGISTRIES_CONF="$BUILDAH_DIR/registries.conf"
POLICY="$BUILDAH_DIR/policy.json"
# Nothing is pulled from a registry: every FROM is a local image, so no build-time network is needed.
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-oci}

# Serialise builds that share $GRPO_CACHE (two checkouts building at once clobbered each other's staging
# directory). One lock file per step: a child step must not wait on its parent's lock.
lock() { mkdir -p "$IMAGE_CACHE"; exec {LOCK_FD}>"$IMAGE_CACHE/.$1.lock"; flock "$LOCK_FD"; }

say() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# sha256 of the named files' contents and paths (directories: every file under them, bytecode excluded).
hash_inputs() {
  (cd "$ROOT" && find "$@" -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -name '*.py[cod]' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-64
}

write_buildah_config() {
  mkdir -p "$BUILDAH_DIR/root" "$BUILDAH_DIR/run"
  # overlay: the kernel has it and / is ext4; vfs would copy the 5 GB venv layer on every step.
  cat >"$CONTAINERS_STORAGE_CONF" <<EOF
[storage]
driver = "overlay"
graphroot = "$BUILDAH_DIR/root"
runroot = "$BUILDAH_DIR/run"
EOF
  # cgroupfs: no systemd here (cgroups v1, hybrid); runc: crun refuses hybrid cgroups (shared/notes/real-node.md).
  # default_ulimits empty: root lacks CAP_SYS_RESOURCE, so raising limits would fail.
  cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
events_logger = "none"
runtime = "runc"
EOF
  printf 'unqualified-search-registries = []\nshort-name-mode = "enforcing"\n' >"$CONTAINERS_REGISTRIES_CONF"
  printf '{"default":[{"type":"insecureAcceptAnything"}]}\n' >"$POLICY"
}


