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

kueue_built() { [ -x "$KUEUE_BIN/kueue" ]; }

kueue_wanted() {
  case "${GRPO_KUEUE:-}" in
    0) return 1 ;;
    1) kueue_built || { echo "GRPO_KUEUE=1 but Kueue is not built: run 'hack/cluster/build.sh kueue' (make cluster-bins)" >&2; exit 1; } ;;
  esac
  kueue_built
}

kueue_ok() { pid_alive kueue && http_ok "http://127.0.0.1:$KUEUE_PROBE_PORT/readyz"; }

# A CA and a serving certificate for 127.0.0.1: the apiserver calls the webhooks by URL (no Service: Kueue
# runs on the host), so Kueue's own certificate rotator (which writes a Secret for a Service name) is off.
_kueue_certs() {
  local c="$KUEUE_DIR/certs"
  [ -s "$c/tls.crt" ] && [ -s "$c/ca.crt" ] && return 0
  mkdir -p "$c"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=grpo-kueue-ca" \
    -keyout "$c/ca.key" -out "$c/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$c/tls.key" -out "$c/tls.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$c/ext.cnf"
  openssl x509 -req -in "$c/tls.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial -days 3650 \
    -extfile "$c/ext.cnf" -out "$c/tls.crt" >/dev/null 2>&1
  rm -f "$c/tls.csr" "$c/ext.cnf"
}

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
    for f in $KUEUE_FRAMEWORKS; do echo "  - \"$f\""; done
  } > "$KUEUE_DIR/config.yaml"
}

# Kueue's own webhook manifests with each Service reference replaced by the loopback URL and our CA; only the
# webhooks of Kueue's objects and of the enabled integrations.
_kueue_webhooks() {
  python3 - "$KUEUE_SRC/config/components/webhook/manifests.yaml" "$KUEUE_DIR/certs/ca.crt" \
    "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" "$KUEUE_FRAMEWORKS" <<'PY'
import base64, sys, yaml
src, ca, base, frameworks = sys.argv[1:]
ca_b64 = base64.b64encode(open(ca, "rb").read()).decode()
# "kubeflow.org/pytorchjob" -> "-kubeflow-org-v1-pytorchjob" (the path suffix controller-gen derives)
wanted = ["-kueue-x-k8s-io-"] + [f"-{g.replace('.', '-')}-v1-{k}" for g, k in (f.split("/") for f in frameworks.split())]
docs = [d for d in yaml.safe_load_all(open(src)) if d]
for d in docs:
    d["metadata"]["name"] = "grpo-kueue-" + d["metadata"]["name"]
    kept = []
    for w in d["webhooks"]:
        path = w["clientConfig"]["service"]["path"]
        if any(s in path for s in wanted):
            w["clientConfig"] = {"url": base + path, "caBundle": ca_b64}
            if "-kueue-x-k8s-io-" not in path:
                # a job without a queue label is not Kueue's (manageJobsWithoutQueueName: false) and need not
                # pass its webhook: otherwise every PyTorchJob/RayJob create is decoded by Kueue first, and a
                # malformed one gets Kueue's 400 instead of the API server's own 422 schema error
                w["objectSelector"] = {"matchExpressions": [{"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]}
            kept.append(w)
    d["webhooks"] = kept
print(yaml.safe_dump_all(docs, sort_keys=False))
PY
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
  _kueue_certs; _kueue_config
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
