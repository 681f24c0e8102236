#!/usr/bin/env bash
# Stop the grpo-launcher local control plane and leave no process behind. Cluster state is deleted
# (the build cache and served-log files are kept). Safe to run when nothing is running.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"
# shellcheck source=node.sh
. "$HERE/node.sh"
# shellcheck source=kueue.sh
. "$HERE/kueue.sh"
# shellcheck source=trainer.sh
. "$HERE/trainer.sh"
# shellcheck source=flux.sh
. "$HERE/flux.sh"
mkdir -p "$CLUSTER_DIR"
exec 9>"$CLUSTER_DIR/.lock.down"; flock -w 300 9 || true
T0=$(date +%s)
rm -f "$MARKER"

# Flux first: a running kustomize-controller would re-create what is deleted next
flux_down
rm -rf "$FLUX_DIR"
# delete jobs while the operators still run, so their finalizers are removed
if api_ready; then
  k delete rayjobs.ray.io,pytorchjobs.kubeflow.org --all -A --wait=true --timeout=60s >/dev/null 2>&1 || true
  k delete trainjobs.trainer.kubeflow.org --all -A --wait=true --timeout=60s >/dev/null 2>&1 || true
fi

kueue_down
trainer_down
for n in kuberay training-operator fake-dashboard; do stop_pid "$n"; done
node_down

if [ -x "$KWOK_BIN/kwokctl" ] && [ -d "$KWOK_WORKDIR/clusters/$CLUSTER_NAME" ]; then
  PATH="$TOOLS_LINK:$PATH" "$KWOK_BIN/kwokctl" --name "$CLUSTER_NAME" delete cluster --kubeconfig="$KWOKCTL_KUBECONFIG" \
    > "$LOGS/kwokctl-delete.log" 2>&1 9>&- || say "kwokctl delete failed (see $LOGS/kwokctl-delete.log)"
fi

# anything of ours still alive (e.g. state dir removed by hand)? stop it by pid.
left=$(our_procs)
if [ -n "$left" ]; then
  say "stopping leftover processes:"; echo "$left" >&2
  for p in $(echo "$left" | awk '{print $1}'); do kill "$p" 2>/dev/null || true; done
  sleep 2
  for p in $(our_procs | awk '{print $1}'); do kill -9 "$p" 2>/dev/null || true; done
fi
# (the training-operator cert copy in /tmp/k8s-webhook-server/serving-certs is shared by every cluster on the
# host and rewritten by up.sh, so it is left alone)
rm -rf "$KWOK_WORKDIR" "$KUBECONFIG_PATH" "$KWOKCTL_KUBECONFIG"
left=$(our_procs)
if [ -n "$left" ]; then say "processes still running:"; echo "$left" >&2; exit 1; fi
say "down in $(( $(date +%s) - T0 ))s; no cluster process left"
