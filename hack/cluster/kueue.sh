# Kueue (sourced by up.sh / down.sh / status.sh): the controller built from sigs.k8s.io/kueue's Go module by
# `hack/cluster/build.sh kueue` (part of `make cluster-bins`, not of `make run`), run out of cluster like the
# other operators, with its CRDs from the same module and its webhooks served on loopback.
#   integrations: kubeflow.org/pytorchjob and ray.io/rayjob (the launcher's backends)
#   ResourceFlavor a100 (the KWOK A100 nodes' label), ClusterQueue grpo-a100 with 3 GPUs (one 2-GPU experiment
#   fits, two do not), pre-emption of lower-priority workloads within the queue.
#   LocalQueues are made per namespace by whoever uses one (the tests: tests/e2e/kueue_support.py).
# GRPO_KUEUE=1: required (up.sh fails when it is not built), 0: never started; unset: started when built.
KUEUE_NS=kueue-system
KUEUE_DIR="$CLUSTER_DIR/kueue"
KUEUE_CLUSTER_QUEUE=grpo-a100
KUEUE_GPU_QUOTA=${GRPO_KUEUE_GPU_QUOTA:-3}
# what the launcher can submit to Kueue; the webhooks of the other integrations are not installed (an installed
# webhook that nothing serves would refuse every Deployment/Job/Pod in the cluster)
KUEUE_FRAMEWORKS="kubeflow.org/pytorchjob ray.io/rayjob"
# + Trainer v2's TrainJob when up.sh starts Trainer (before Kueue: Kueue sets up an integration only for the CRDs it
# finds at start, and a webhook registered for an integration it skipped would refuse every queued TrainJob)
_kueue_frameworks() { echo "$KUEUE_FRAMEWORKS"; if declare -F trainer_wanted >/dev/null && trainer_wanted; then echo trainer.kubeflow.org/trainjob; fi; }

kueue_built() { [ -x "$KUEUE_BIN/kueue" ]; }

kueue_wanted() {
  case "${GRPO_KUEUE:-}" in
    0) return 1 ;;
    1) kueue_built || { echo "GRPO_KUEUE=1 but Kueue is not built: run 'hack/cluster/build.sh kueue' (make cluster-bins)" >&2; exit 1; } ;;
  esac
  kueue_built
}

kueue_ok() { pid_alive kueue && http_ok "http://127.0.0.1:$KUEUE_PROBE_PORT/readyz"; }

_kueue_config() {
  local f
  {
    cat <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $KUEUE_NS
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_PROBE_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $KUEUE_DIR/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks:
EOF
    for f in $(_kueue_frameworks); do echo "  - \"$f\""; done
  } > "$KUEUE_DIR/config.yaml"
}

# Kueue's own webhook manifests pointed at the loopback URL with our CA; only the webhooks of Kueue's objects and
# of the enabled integrations. A job without a queue label is not Kueue's (manageJobsWithoutQueueName: false) and
# need not pass its webhook: otherwise every PyTorchJob/RayJob create is decoded by Kueue first, and a malformed one
# gets Kueue's 400 instead of the API server's own 422 schema error.
_kueue_webhooks() {
  local args=(--keep=-kueue-x-k8s-io-) f kd
  for f in $(_kueue_frameworks); do
    # "kubeflow.org/pytorchjob" -> the path controller-gen derives ends in "-pytorchjob" (".../mutate-kubeflow-org-v1-pytorchjob")
    kd=${f#*/}
    args+=("--keep=-$kd" "--select=-$kd=kueue.x-k8s.io/queue-name")
  done
  python3 "$HERE/loopback_webhooks.py" "$KUEUE_SRC/config/components/webhook/manifests.yaml" "$KUEUE_DIR/certs/ca.crt" \
    "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" grpo-kueue- "${args[@]}"
}

_kueue_objects() {
  cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: a100
spec:
  nodeLabels:
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $KUEUE_CLUSTER_QUEUE
spec:
  namespaceSelector: {}
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: "192"}
      - {name: memory, nominalQuota: 2240Gi}
      - {name: nvidia.com/gpu, nominalQuota: "$KUEUE_GPU_QUOTA"}
EOF
}

kueue_up() {
  local t0 ok=
  t0=$(date +%s)
  KUEUE_SRC=$(moddir "sigs.k8s.io/kueue@$KUEUE_VERSION")
  mkdir -p "$KUEUE_DIR"
  k create namespace "$KUEUE_NS" --dry-run=client -o yaml | k apply -f - >/dev/null
  k apply --server-side --force-conflicts --field-manager=grpo-cluster -f "$KUEUE_SRC/config/components/crd/bases" >/dev/null
  k wait --for=condition=Established --timeout=60s crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io \
    crd/resourceflavors.kueue.x-k8s.io crd/workloads.kueue.x-k8s.io >/dev/null
  loopback_certs "$KUEUE_DIR/certs" grpo-kueue; _kueue_config
  # Kueue v0.17 reads its metrics server's certificate from a fixed path when internal cert management is off
  # (cmd/kueue/main.go: /etc/kueue/metrics/certs); like the training-operator's /tmp cert dir, it is shared
  # by every cluster on the host, so it points at this cluster's certificates.
  mkdir -p /etc/kueue/metrics 2>/dev/null && ln -sfn "$KUEUE_DIR/certs" /etc/kueue/metrics/certs 2>/dev/null || {
    echo "kueue: cannot create /etc/kueue/metrics/certs (Kueue's fixed metrics certificate path; needs root)" >&2; exit 1; }
  ln -sfn "$KUEUE_BIN/kueue" "$CLUSTER_DIR/bin/kueue"
  # VisibilityOnDemand off: its aggregated API server would need an APIService and certificates of its own
  KUBECONFIG="$KUBECONFIG_PATH" start_bg kueue "$CLUSTER_DIR/bin/kueue" --config="$KUEUE_DIR/config.yaml" \
    --kubeconfig="$KUBECONFIG_PATH" --feature-gates=VisibilityOnDemand=false --zap-log-level=info
  for _ in $(seq 240); do kueue_ok && { ok=1; break; }; pid_alive kueue || break; sleep 0.5; done
  [ -n "$ok" ] || { tail -30 "$LOGS/kueue.log" >&2; echo "kueue not ready" >&2; exit 1; }
  # webhooks only once it serves them: a registered webhook with nothing behind it refuses every create
  _kueue_webhooks | k apply --server-side --force-conflicts --field-manager=grpo-cluster -f - >/dev/null
  _kueue_objects | k apply --server-side --force-conflicts --field-manager=grpo-cluster -f - >/dev/null
  say "kueue $KUEUE_VERSION ready: ClusterQueue $KUEUE_CLUSTER_QUEUE ($KUEUE_GPU_QUOTA GPUs) ($(( $(date +%s) - t0 ))s)"
}

# Before stopping the process: its webhooks (a webhook without a server refuses every PyTorchJob/RayJob create).
kueue_down() {
  if api_ready; then
    k delete mutatingwebhookconfiguration grpo-kueue-mutating-webhook-configuration --ignore-not-found >/dev/null 2>&1 || true
    k delete validatingwebhookconfiguration grpo-kueue-validating-webhook-configuration --ignore-not-found >/dev/null 2>&1 || true
  fi
  stop_pid kueue
}

kueue_status() {
  if pid_alive kueue; then echo "$(printf '%-18s' kueue:) running pid $(cat "$PIDS/kueue.pid") (log $LOGS/kueue.log)"
  else echo "$(printf '%-18s' kueue:) NOT running"; fi
}
