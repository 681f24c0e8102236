#!/usr/bin/env bash
# Static scans: checkov over every manifest the launcher and the chart render (plus the pods the
# operators create from them), manifests/ and the Dockerfile. Zero failed checks allowed beyond .checkov.yaml's
# commented skip list. Usage: hack/scan/run.sh CHECKOV_BIN HELM_DIR
set -euo pipefail
CHECKOV=${1:?checkov binary}
HELM_DIR=${2:?directory holding helm}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${VPY:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PATH="$HELM_DIR:$PATH"

"$PY" "$ROOT/hack/scan/scan_views.py" "$WORK/rendered" "$HELM_DIR/helm"
status=0
scan() {  # label, checkov args...
  local label=$1; shift
  local out
  out=$("$CHECKOV" --config-file "$ROOT/.checkov.yaml" "$@" 2>&1) || status=1
  local passed failed
  passed=$( (grep -o 'Passed checks: [0-9]*' <<<"$out" || true) | awk '{s+=$3} END {print s+0}' || true)
  failed=$( (grep -o 'Failed checks: [0-9]*' <<<"$out" || true) | awk '{s+=$3} END {print s+0}' || true)
  printf 'checkov %-28s passed %4d  failed %d\n' "$label" "$passed" "$failed"
  if [ "$failed" != 0 ] || [ "$passed" = 0 ]; then
    grep -E 'Check:|FAILED|File:' <<<"$out" || echo "$out" | tail -20
    status=1
  fi
}
scan "launcher, chart, manifests/ + pods" -d "$WORK/rendered" --framework kubernetes
scan "docker/Dockerfile" -f "$ROOT/docker/Dockerfile" --framework dockerfile
exit $status
