#!/usr/bin/env bash
# usage: hack/ci/timed.sh PHASE LANE COMMAND [ARG...]
# Runs COMMAND and, when GRPO_TIMINGS_FILE is set, appends {"phase", "lane", "seconds", "rc"} to it (the lines
# hack/lanes.py writes too), so `.ci/run` can close with where CI's time went (hack/ci/times.py). Exits as COMMAND did.
set -u
phase=$1 lane=$2; shift 2
start=$(date +%s.%N)
"$@"
rc=$?
if [ -n "${GRPO_TIMINGS_FILE:-}" ]; then
  printf '{"phase": "%s", "lane": "%s", "seconds": %.1f, "rc": %d}\n' \
    "$phase" "$lane" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$rc" >> "$GRPO_TIMINGS_FILE"
fi
exit "$rc"
