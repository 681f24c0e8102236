#!/usr/bin/env bash
# usage: hack/ci/timed.sh PHASE LANE COMMAND [ARG...]
# Runs COMMAND and, when GRPO_TIMINGS_FILE is set, appends {"phase", "lane", "seconds", "rc", "cpu_seconds"} to it
# (the lines hack/lanes.py writes too, less the CPU), so `.ci/run` can close with where CI's time went
# (hack/ci/times.py). cpu_seconds: user + system time of COMMAND and every process it waited for (bash's `times`:
# getrusage of the children; a pod's processes, the kubelet's children, are not in it). Exits as COMMAND did.
set -u
phase=$1 lane=$2; shift 2
start=$(date +%s.%N)
"$@"
rc=$?
if [ -n "${GRPO_TIMINGS_FILE:-}" ]; then
  # `times`' second line: the children's user and system time, e.g. "1m2.345s 0m3.210s" (run in this shell, not in
  # a $(...) subshell, whose children are not COMMAND's)
  usage=$(mktemp); times > "$usage"
  cpu=$(sed -n 2p "$usage" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] }; print n }')
  rm -f "$usage"
  printf '{"phase": "%s", "lane": "%s", "seconds": %.1f, "rc": %d, "cpu_seconds": %.1f}\n' \
    "$phase" "$lane" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$rc" "$cpu" >> "$GRPO_TIMINGS_FILE"
fi
exit "$rc"
