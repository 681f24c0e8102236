#!/usr/bin/env bash
# Cold build of the Kubernetes commands `make run` needs (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy), two ways, each from an empty Go build cache:
#   before: two builds at once, as `make run` ran them until 2026-12-05 (the control plane, and 10 s later the node
#           lane's kubelet + kube-proxy: build.sh at BASE, default 8ee605a);
#   after:  the five in one `go build` (build.sh of this tree: `hack/cluster/build.sh kubernetes kubelet`).
# The module cache is the real one (downloads are not what is measured) and the wrapper module is prepared before the
# clock starts. Prints both wall times and after/before. Needs the cache's gomod/ and work/kubernetes-* (any build).
# Usage: bench/bench_k8s_build.sh [BASE]      (about 20 min on 2 cores; nothing else should run)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:-8ee605a}   # the last commit with the two builds
. "$ROOT/hack/cluster/versions.sh"
REAL=$GRPO_CACHE
SCRATCH=$(mktemp -d /tmp/bench-k8s-build.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT

# fresh GRPO_CACHE: the real module cache and the prepared wrapper module, an empty Go build cache and bin/
fresh() {
  local c="$SCRATCH/cache-$1"
  mkdir -p "$c/work"
  ln -s "$REAL/gomod" "$c/gomod"
  cp -r "$REAL/work/kubernetes-$K8S_VERSION" "$c/work/"
  echo "$c"
}
secs() { local s=$(date +%s.%N); "$@" >"$SCRATCH/last.log" 2>&1 || { cat "$SCRATCH/last.log" >&2; exit 1; }; echo "$(date +%s.%N) - $s" | bc; }

mkdir -p "$SCRATCH/old/hack/cluster"
git -C "$ROOT" show "$BASE:hack/cluster/build.sh" > "$SCRATCH/old/hack/cluster/build.sh"
git -C "$ROOT" show "$BASE:hack/cluster/versions.sh" > "$SCRATCH/old/hack/cluster/versions.sh"
chmod +x "$SCRATCH/old/hack/cluster/build.sh"

before_run() {
  local c=$1
  GRPO_CACHE=$c "$SCRATCH/old/hack/cluster/build.sh" kubernetes & local a=$!
  sleep 10
  GRPO_CACHE=$c "$SCRATCH/old/hack/cluster/build.sh" kubelet & local b=$!
  wait $a && wait $b
}
c=$(fresh before); before=$(secs before_run "$c"); rm -rf "$c"
echo "before (two builds at once, $BASE): ${before} s"
c=$(fresh after); after=$(secs env GRPO_CACHE="$c" "$ROOT/hack/cluster/build.sh" kubernetes kubelet); rm -rf "$c"
echo "after (one go build): ${after} s"
echo "after/before: $(echo "scale=3; $after / $before" | bc)"
