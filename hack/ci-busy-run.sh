#!/usr/bin/env bash
# One CI-like run on a machine kept busy: a fresh clone of main into /work/NAME, `CI=true bash .ci/run`, optionally
# with every C compiler moved out of /usr/bin for the run (--no-cc; put back on exit) and `stress --cpu N` beside it
# (apt-get install stress). The log is /work/logs/NAME.log. Needs root (as CI). Issue 27's check: run it twice.
# Usage: hack/ci-busy-run.sh NAME [--no-cc] [--stress N]
set -uo pipefail
name=$1; shift
nocc=0; stressn=0
while [ $# -gt 0 ]; do case $1 in --no-cc) nocc=1;; --stress) stressn=$2; shift;; esac; shift; done
dir=/work/$name; log=/work/logs/$name.log; mkdir -p /work/logs
rm -rf "$dir"; git clone -q /work/main "$dir"
hidden=/root/hidden-cc
restore() {
  [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
  # -L too: a relative link (x86_64-linux-gnu-gcc -> gcc-12) is broken while it sits in $hidden
  if [ $nocc = 1 ]; then for f in "$hidden"/*; do { [ -e "$f" ] || [ -L "$f" ]; } && mv "$f" /usr/bin/; done; fi
}
trap restore EXIT
if [ $nocc = 1 ]; then
  mkdir -p $hidden
  for f in gcc g++ cc c++ x86_64-linux-gnu-gcc x86_64-linux-gnu-gcc-12 x86_64-linux-gnu-g++-12 gcc-12 g++-12 clang; do
    [ -e /usr/bin/$f ] || [ -L /usr/bin/$f ] && mv /usr/bin/$f $hidden/
  done
  echo "C compilers hidden: $(ls $hidden | tr '\n' ' '); which gcc cc: $(which gcc cc 2>&1 | tr '\n' ' ')" >> "$log"
fi
if [ "$stressn" -gt 0 ]; then stress --cpu "$stressn" >/dev/null 2>&1 & spid=$!; echo "stress --cpu $stressn (pid $spid)" >> "$log"; fi
start=$(date +%s); echo "start $(date -u +%FT%TZ) at $(git -C "$dir" rev-parse --short HEAD)" >> "$log"
(cd "$dir" && CI=true bash .ci/run) >> "$log" 2>&1
rc=$?
echo "RC $rc in $(( $(date +%s) - start )) s; end $(date -u +%FT%TZ)" >> "$log"
exit $rc
