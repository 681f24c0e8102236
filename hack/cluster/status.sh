#!/usr/bin/env bash
# Show the state of the grpo-launcher local control plane. Exit 0 when everything is up.
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
rc=0
echo "cluster dir: $CLUSTER_DIR"
echo "kubeconfig:  $KUBECONFIG_PATH"
if [ -f "$MARKER" ]; then echo "marker:      $MARKER ($(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["cluster_id"])' "$MARKER"))"
else echo "marker:      absent"; rc=1; fi
if api_ready; then echo "apiserver:   ready https://127.0.0.1:$APISERVER_PORT ($(k version -o json 2>/dev/null | python3 -c 'import json,sys;print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'))"
else echo "apiserver:   NOT ready"; rc=1; fi
for n in training-operator kuberay fake-dashboard; do
  if pid_alive "$n"; then echo "$(printf '%-18s' "$n:") running pid $(cat "$PIDS/$n.pid") (log $LOGS/$n.log)"
  else echo "$(printf '%-18s' "$n:") NOT running"; rc=1; fi
done
if kueue_built; then kueue_status; pid_alive kueue || rc=1; else echo "kueue:             not built (hack/cluster/build.sh kueue)"; fi
if trainer_built; then trainer_status; { pid_alive trainer && pid_alive jobset; } || rc=1
else echo "trainer, jobset:   not built (hack/cluster/build.sh trainer jobset)"; fi
if flux_built; then flux_status; else echo "flux:              not built (hack/cluster/build.sh flux)"; fi
if node_wanted 2>/dev/null; then node_status; node_ok || rc=1; else echo "real node:         not built (make node-build)"; fi
if api_ready; then
  k get nodes -L nvidia.com/gpu.product -o wide 2>/dev/null | cut -c1-150
  echo "control-plane component logs: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/logs/"
fi
echo "processes:"; our_procs | awk '{printf "  %s %s\n", $1, $2}'
exit $rc
