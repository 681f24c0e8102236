# Kubeflow Trainer v2 on JobSet (sourced by up.sh / down.sh / status.sh): the Trainer controller manager built from
# github.com/kubeflow/trainer/v2's Go module and the JobSet controller from sigs.k8s.io/jobset's
# (`hack/cluster/build.sh trainer jobset`, part of `make cluster-bins`, not of `make run`), run out of cluster like
# the other operators, their CRDs from the same modules, their webhooks served on loopback with our CA.
# GRPO_TRAINER=1: required (up.sh fails when they are not built), 0: never started; unset: started when built.
TRAINER_DIR="$CLUSTER_DIR/trainer"
JOBSET_DIR="$CLUSTER_DIR/jobset"

trainer_built() { [ -x "$TRAINER_BIN/trainer-controller-manager" ] && [ -x "$JOBSET_BIN/jobset-controller" ]; }

trainer_wanted() {
  case "${GRPO_TRAINER:-}" in
    0) return 1 ;;
    1) trainer_built || { echo "GRPO_TRAINER=1 but Trainer/JobSet are not built: run 'hack/cluster/build.sh trainer jobset' (make cluster-bins)" >&2; exit 1; } ;;
  esac
  trainer_built
}

trainer_ok() {
  pid_alive jobset && http_ok "http://127.0.0.1:$JOBSET_PROBE_PORT/readyz" &&
    pid_alive trainer && http_ok "http://127.0.0.1:$TRAINER_PROBE_PORT/readyz"
}

_jobset_config() {
  cat > "$JOBSET_DIR/config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$JOBSET_PROBE_PORT
metrics:
  bindAddress: 127.0.0.1:$JOBSET_METRICS_PORT
  certDir: $JOBSET_DIR/certs
webhook:
  host: 127.0.0.1
  port: $JOBSET_WEBHOOK_PORT
  certDir: $JOBSET_DIR/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
EOF
}

_trainer_config() {
  cat > "$TRAINER_DIR/config.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$TRAINER_PROBE_PORT
  readinessEndpointName: readyz
  livenessEndpointName: healthz
metrics:
  bindAddress: 127.0.0.1:$TRAINER_METRICS_PORT
  secureServing: false
webhook:
  host: 127.0.0.1
  port: $TRAINER_WEBHOOK_PORT
leaderElection:
  leaderElect: false
certManagement:
  enable: false
EOF
}

# _operator_up NAME BIN READY_FN ARGS...: start one controller and wait until its readyz answers
_operator_up() {
  local name=$1 bin=$2 ready=$3; shift 3
  ln -sfn "$bin" "$CLUSTER_DIR/bin/$(basename "$bin")"
  KUBECONFIG="$KUBECONFIG_PATH" start_bg "$name" "$CLUSTER_DIR/bin/$(basename "$bin")" "$@"
  wait_ready "$name" "$ready"
}

trainer_up() {
  local t0 tsrc jsrc
  t0=$(date +%s)
  tsrc=$(moddir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")
  jsrc=$(moddir "sigs.k8s.io/jobset@$JOBSET_VERSION")
  mkdir -p "$TRAINER_DIR/tmp" "$JOBSET_DIR"
  k apply --server-side --force-conflicts --field-manager=grpo-cluster -f "$jsrc/config/components/crd/bases" \
    -f "$tsrc/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml" \
    -f "$tsrc/manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml" \
    -f "$tsrc/manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml" >/dev/null
  k wait --for=condition=Established --timeout=60s crd/jobsets.jobset.x-k8s.io crd/trainjobs.trainer.kubeflow.org \
    crd/trainingruntimes.trainer.kubeflow.org crd/clustertrainingruntimes.trainer.kubeflow.org >/dev/null
  if ! pid_alive jobset; then
    loopback_certs "$JOBSET_DIR/certs" grpo-jobset; _jobset_config
    _operator_up jobset "$JOBSET_BIN/jobset-controller" "http://127.0.0.1:$JOBSET_PROBE_PORT/readyz" \
      --config="$JOBSET_DIR/config.yaml" --kubeconfig="$KUBECONFIG_PATH" --zap-log-level=info
  fi
  # JobSet's pod webhooks (exclusive placement) see only JobSet's pods: every other pod in the cluster is created
  # without waiting on it (nor failing while it is down)
  python3 "$HERE/loopback_webhooks.py" "$jsrc/config/components/webhook/manifests.yaml" "$JOBSET_DIR/certs/ca.crt" \
    "https://127.0.0.1:$JOBSET_WEBHOOK_PORT" grpo-jobset- "--select=--v1-pod=jobset.sigs.k8s.io/jobset-name" |
    k apply --server-side --force-conflicts --field-manager=grpo-cluster -f - >/dev/null
  if ! pid_alive trainer; then
    loopback_certs "$TRAINER_DIR/certs" grpo-trainer; _trainer_config
    # Trainer's config has no certificate directory: controller-runtime's default is $TMPDIR/k8s-webhook-server/
    # serving-certs, which the training-operator's webhook already uses in /tmp, so Trainer gets a TMPDIR of its own
    mkdir -p "$TRAINER_DIR/tmp/k8s-webhook-server"
    ln -sfn "$TRAINER_DIR/certs" "$TRAINER_DIR/tmp/k8s-webhook-server/serving-certs"
    TMPDIR="$TRAINER_DIR/tmp" _operator_up trainer "$TRAINER_BIN/trainer-controller-manager" \
      "http://127.0.0.1:$TRAINER_PROBE_PORT/readyz" --config="$TRAINER_DIR/config.yaml" --kubeconfig="$KUBECONFIG_PATH" \
      --zap-log-level=info
  fi
  python3 "$HERE/loopback_webhooks.py" "$tsrc/manifests/base/webhook/manifests.yaml" "$TRAINER_DIR/certs/ca.crt" \
    "https://127.0.0.1:$TRAINER_WEBHOOK_PORT" grpo-trainer- |
    k apply --server-side --force-conflicts --field-manager=grpo-cluster -f - >/dev/null
  say "trainer $TRAINER_VERSION + jobset $JOBSET_VERSION ready ($(( $(date +%s) - t0 ))s)"
}

# Before stopping the processes: their webhooks (a webhook without a server refuses every create it matches).
trainer_down() {
  local c
  if api_ready; then
    for c in grpo-trainer-mutating-webhook-configuration grpo-jobset-mutating-webhook-configuration; do
      k delete mutatingwebhookconfiguration "$c" --ignore-not-found >/dev/null 2>&1 || true; done
    for c in grpo-trainer-validating-webhook-configuration grpo-jobset-validating-webhook-configuration; do
      k delete validatingwebhookconfiguration "$c" --ignore-not-found >/dev/null 2>&1 || true; done
  fi
  stop_pid trainer; stop_pid jobset
}

trainer_status() {
  local n
  for n in trainer jobset; do
    if pid_alive $n; then echo "$(printf '%-18s' $n:) running pid $(cat "$PIDS/$n.pid") (log $LOGS/$n.log)"
    else echo "$(printf '%-18s' $n:) NOT running"; fi
  done
}
