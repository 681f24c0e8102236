#!/usr/bin/env bash
# Peak memory of each pod on the local cluster's real nodes while a test runs beside it (bench/RESULTS.md "The
# RayJob's memory"): every 3 s, each pod cgroup's peak (cgroup v1 memory.max_usage_in_bytes, page cache included;
# v2 memory.peak) and the host's used memory; on Ctrl-C or SIGTERM, prints the peaks by pod name.
# Usage: bench/pod_memory_peaks.sh [INTERVAL_S]      (run as root beside e.g. a pytest of tests/e2e/test_real_*)
set -uo pipefail
: "${GRPO_CACHE:=$HOME/.cache/grpo-launcher}"
K="$GRPO_CACHE/bin/tools/kubectl --kubeconfig $GRPO_CACHE/cluster/kubeconfig"
declare -A peak name
host=0
report() {
  for uid in "${!peak[@]}"; do
    printf '%6.2f GiB  %s\n' "$(echo "${peak[$uid]} / 2^30" | bc -l)" "${name[$uid]:-pod$uid}"
  done | sort -rn
  printf '%6.2f GiB  host used memory\n' "$(echo "$host / 2^30" | bc -l)"
  exit 0
}
trap report INT TERM
while true; do
  for d in /sys/fs/cgroup/memory/grpo-node-*/kubepods/{,*/}pod* /sys/fs/cgroup/unified/grpo-node-*/kubepods/{,*/}pod*; do
    f=$d/memory.max_usage_in_bytes; [ -f "$f" ] || f=$d/memory.peak; [ -f "$f" ] || continue
    uid=${d##*/pod}; v=$(cat "$f"); [ "$v" -gt "${peak[$uid]:-0}" ] && peak[$uid]=$v
  done
  while IFS=$'\t' read -r uid n; do [ -n "$uid" ] && name[$uid]=$n; done \
    < <($K get pods -A -o jsonpath='{range .items[*]}{.metadata.uid}{"\t"}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' 2>/dev/null)
  used=$(free -b | awk '/Mem:/{print $3}'); [ "$used" -gt "$host" ] && host=$used
  sleep "${1:-3}"
done
