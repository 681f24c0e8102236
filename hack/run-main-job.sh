#!/usr/bin/env bash
# `make run`: run an experiment (default configs/grpo-exp3.yaml) end to end and write its report.
#
# - KUBECONFIG set: submit to that cluster, follow the logs to the end, write runs/<job>/report.md.
# - KUBECONFIG unset: build (first time) and start the embedded local control plane (hack/cluster),
#   then do the same there. Its nodes are KWOK fakes: no container runs, so the trainer pod "prints"
#   a realistic verl GRPO log (launcher.simlog) served through the pod-logs API as it grows, and the
#   pod completes when that log ends. Everything else — API server, scheduler, training-operator,
#   the launcher's submit/follow/metrics/report — is real.
set -euo pipefail
CONFIG=${1:-configs/grpo-exp3.yaml}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VPY=${VPY:-$ROOT/.venv/bin/python}
L() { "$VPY" -m launcher "$@"; }

if [ -n "${KUBECONFIG:-}" ]; then
  echo "== submitting $CONFIG to the cluster in KUBECONFIG=$KUBECONFIG"
  job=$(L validate "$CONFIG" | sed -n 's/.* -> [a-z]* \([a-z0-9-]*\) in namespace .*/\1/p')
  L submit "$CONFIG" --follow
  L report "runs/$job"
  exit 0
fi

echo "== no KUBECONFIG: using the embedded local control plane (hack/cluster/README.md)"
make -s cluster-build tools
export KUBECONFIG
KUBECONFIG=$(make -s cluster-up | tail -1)
HERE=$ROOT/hack/cluster source hack/cluster/common.sh   # KUBECTL, SERVED_LOGS, k()
export PATH="$(dirname "$KUBECTL"):$PATH"

STEPS=$(L validate "$CONFIG" --show-overrides | sed -n 's/^trainer.total_training_steps=//p')
PACE=${GRPO_DEMO_STEP_SECONDS:-2}
# The fake pod completes a little after its simulated log ends.
DELAY=$(( STEPS * PACE + 20 ))s
SETS=(--set "scheduling.pod_annotations={\"pod-complete.stage.kwok.x-k8s.io/delay\": \"$DELAY\"}")
job=$(L validate "$CONFIG" "${SETS[@]}" | sed -n 's/.* -> [a-z]* \([a-z0-9-]*\) in namespace .*/\1/p')
ns=$(L validate "$CONFIG" "${SETS[@]}" | sed -n 's/.* in namespace \([a-z0-9-]*\):.*/\1/p')

# A rerun of the demo starts over rather than attaching to the finished run.
if k get pytorchjob "$job" -n "$ns" >/dev/null 2>&1 || k get rayjob "$job" -n "$ns" >/dev/null 2>&1; then
  L delete "$job" -n "$ns"
fi
rm -rf "runs/$job"

# Serve the trainer pod's log: a simulated verl run that grows one step every $PACE seconds.
mkdir -p "$SERVED_LOGS"
log="$SERVED_LOGS/demo-$job.log"
: > "$log"
backend=$("$VPY" -c "from launcher.config import load_spec; print(load_spec('$CONFIG').backend)")
if [ "$backend" = pytorchjob ]; then pod="$job-master-0"; else pod=""; fi
if [ -n "$pod" ]; then
  k apply -f - >/dev/null <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: $pod, namespace: $ns}
spec:
  logs:
  - logsFile: $log
    follow: true
EOF
fi
"$VPY" -m launcher.simlog --steps "$STEPS" --cri --pace "$PACE" -o "$log" &
player=$!
trap 'kill $player 2>/dev/null || true' EXIT

L submit "$CONFIG" "${SETS[@]}" --follow
L report "runs/$job"
echo "== report: runs/$job/report.md"
