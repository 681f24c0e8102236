# Shared settings for up.sh / down.sh / status.sh (sourced).
HERE=${HERE:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=versions.sh
. "$HERE/versions.sh"

CLUSTER_NAME=${GRPO_CLUSTER_NAME:-grpo}
CLUSTER_DIR=${GRPO_CLUSTER_DIR:-$GRPO_CACHE/cluster}
KUBECONFIG_PATH="$CLUSTER_DIR/kubeconfig"
MARKER="$CLUSTER_DIR/grpo-cluster.json"          # written last by up.sh: "this cluster is ours"
OWNER_CM=grpo-launcher-cluster                    # ConfigMap in kube-system with the same cluster id
# kwokctl always edits some kubeconfig (`--kubeconfig=` is refused by `delete cluster`: "empty path"); give it a
# scratch file of ours so ~/.kube/config is never touched. The kubeconfig to use is $KUBECONFIG_PATH.
KWOKCTL_KUBECONFIG="$CLUSTER_DIR/kwokctl-contexts.kubeconfig"
KWOK_WORKDIR="$CLUSTER_DIR/kwok"                  # kwokctl state; component logs in $KWOK_WORKDIR/clusters/$CLUSTER_NAME/logs
LOGS="$CLUSTER_DIR/logs"                          # operator and fake-dashboard logs
PIDS="$CLUSTER_DIR/pids"
SERVED_LOGS="$CLUSTER_DIR/served-logs"            # CRI-format files served through Logs/ClusterLogs
export KWOK_WORKDIR

# Ports (all on 127.0.0.1 except the training-operator webhook server, which controller-runtime binds on all interfaces)
APISERVER_PORT=${GRPO_APISERVER_PORT:-16443}
ETCD_PORT=${GRPO_ETCD_PORT:-12379}
ETCD_PEER_PORT=${GRPO_ETCD_PEER_PORT:-12380}
KCM_PORT=${GRPO_KCM_PORT:-16257}
SCHED_PORT=${GRPO_SCHED_PORT:-16259}
KWOK_PORT=${GRPO_KWOK_PORT:-16247}
TO_METRICS_PORT=${GRPO_TO_METRICS_PORT:-18080}; TO_PROBE_PORT=${GRPO_TO_PROBE_PORT:-18081}
TO_WEBHOOK_PORT=${GRPO_TO_WEBHOOK_PORT:-19443}
KR_METRICS_PORT=${GRPO_KR_METRICS_PORT:-18180}; KR_PROBE_PORT=${GRPO_KR_PROBE_PORT:-18182}
KUEUE_METRICS_PORT=${GRPO_KUEUE_METRICS_PORT:-18380}; KUEUE_PROBE_PORT=${GRPO_KUEUE_PROBE_PORT:-18381}
KUEUE_WEBHOOK_PORT=${GRPO_KUEUE_WEBHOOK_PORT:-19543}
TRAINER_METRICS_PORT=${GRPO_TRAINER_METRICS_PORT:-18480}; TRAINER_PROBE_PORT=${GRPO_TRAINER_PROBE_PORT:-18481}
TRAINER_WEBHOOK_PORT=${GRPO_TRAINER_WEBHOOK_PORT:-19643}
JOBSET_METRICS_PORT=${GRPO_JOBSET_METRICS_PORT:-18580}; JOBSET_PROBE_PORT=${GRPO_JOBSET_PROBE_PORT:-18581}
JOBSET_WEBHOOK_PORT=${GRPO_JOBSET_WEBHOOK_PORT:-19743}
GIT_PORT=${GRPO_GIT_PORT:-18680}
FLUX_SOURCE_METRICS_PORT=${GRPO_FLUX_SOURCE_METRICS_PORT:-18780}; FLUX_SOURCE_HEALTH_PORT=${GRPO_FLUX_SOURCE_HEALTH_PORT:-18781}
FLUX_STORAGE_PORT=${GRPO_FLUX_STORAGE_PORT:-18782}
FLUX_KUSTOMIZE_METRICS_PORT=${GRPO_FLUX_KUSTOMIZE_METRICS_PORT:-18880}; FLUX_KUSTOMIZE_HEALTH_PORT=${GRPO_FLUX_KUSTOMIZE_HEALTH_PORT:-18881}
DASHBOARD_PORT=${GRPO_FAKE_DASHBOARD_PORT:-18265}

# Default run time of PyTorchJob / Job pods before KWOK marks them Succeeded (per pod override: annotation
# pod-complete.stage.kwok.x-k8s.io/delay). Changing it needs `make cluster-down cluster-up`.
POD_COMPLETE_DELAY_MS=${GRPO_POD_COMPLETE_DELAY_MS:-10000}
FAKE_DASHBOARD_RUN_S=${GRPO_FAKE_DASHBOARD_RUN_S:-5}

KUBECTL="$TOOLS_LINK/kubectl"
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

say() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

pid_alive() { local f="$PIDS/$1.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

api_ready() { [ -f "$KUBECONFIG_PATH" ] && k --request-timeout=5s get --raw /readyz >/dev/null 2>&1; }

http_ok() { python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" >/dev/null 2>&1; }

# the processes of this cluster: executables under $CLUSTER_DIR (kwokctl's bin/ symlinks, our bin/ links) and the
# fake dashboard script there. Other people's kubectl/pytest processes that merely mention the path do not match.
our_procs() {
  ps -eo pid=,args= | awk -v d="$CLUSTER_DIR/" '
    { exe = $2; scr = $3 }
    index(exe, d) == 1 { print; next }
    index($0, "-address " d "nodes/") { print; next }   # the shims of the real nodes containerd
    exe ~ /(^|\/)python[0-9.]*$/ && index(scr, d) == 1 { print }'
}

# write_file FILE < CONTENT: replace FILE only when its content changes, and then by rename, never truncated in place:
# kube-proxy watches its config file and exits when a read finds other content, a half-written file included.
write_file() {
  local tmp; tmp=$(mktemp "$1.XXXXXX")
  cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else chmod 644 "$tmp"; mv -f "$tmp" "$1"; fi
}

# start_bg NAME CMD...: a background process of the cluster, its log in $LOGS/NAME.log and pid in $PIDS/NAME.pid;
# detached (own session) so make/pytest exiting does not stop it
start_bg() {
  local name=$1; shift
  setsid nohup "$@" >> "$LOGS/$name.log" 2>&1 < /dev/null 9>&- &   # 9>&-: do not inherit the lock
  echo $! > "$PIDS/$name.pid"
}

# wait_ready NAME URL: until URL answers (up to 2 min); fails with the tail of NAME's log if NAME exits or it never does
wait_ready() {
  local ok=
  for _ in $(seq 240); do http_ok "$2" && { ok=1; break; }; pid_alive "$1" || break; sleep 0.5; done
  [ -n "$ok" ] || { tail -30 "$LOGS/$1.log" >&2; echo "$1 not ready" >&2; exit 1; }
}

stop_pid() {  # name: TERM, wait up to 10 s, then KILL
  local f="$PIDS/$1.pid" p
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill "$p" 2>/dev/null
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null || true
  fi
  rm -f "$f"
}

# loopback_certs DIR CN: a CA (ca.crt) and a serving certificate for 127.0.0.1 (tls.crt, tls.key) in DIR, made once.
# The operators run on the host, so the API server calls their webhooks by URL with this CA (no Service, no
# certificate rotator writing a Secret for a Service name).
loopback_certs() {
  local c=$1 cn=$2
  [ -s "$c/tls.crt" ] && [ -s "$c/ca.crt" ] && return 0
  mkdir -p "$c"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$cn-ca" \
    -keyout "$c/ca.key" -out "$c/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$c/tls.key" -out "$c/tls.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$c/ext.cnf"
  openssl x509 -req -in "$c/tls.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial -days 3650 \
    -extfile "$c/ext.cnf" -out "$c/tls.crt" >/dev/null 2>&1
  rm -f "$c/tls.csr" "$c/ext.cnf"
}
