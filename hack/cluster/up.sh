#!/usr/bin/env bash
# Start the grpo-launcher local control plane on 127.0.0.1 (idempotent: a running, healthy cluster is a no-op).
#   etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok-controller   (kwokctl, binary runtime)
#   + CRDs (PyTorchJob, RayCluster/RayJob/RayService, KWOK Logs/ClusterLogs) from the operators' Go modules
#   + fake nodes (2x 8 A100, 1 CPU) + training-operator v1 + KubeRay operator (out of cluster) + fake Ray dashboard
#   + the real node grpo-node-0 (containerd, kubelet, kube-proxy, CoreDNS: node.sh) when `make node-build` built it
#     (GRPO_REAL_NODE=1: required, 0: never)
#   + Kueue (kueue.sh) when `hack/cluster/build.sh kueue` built it (GRPO_KUEUE=1: required, 0: never)
#   + Kubeflow Trainer v2 + JobSet (trainer.sh) when `build.sh trainer jobset` built them (GRPO_TRAINER=1/0 alike)
#   + Flux source- and kustomize-controller and a loopback git server (flux.sh), only with GRPO_FLUX=1
# Prints the kubeconfig path on stdout (last line).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"
# shellcheck source=node.sh
. "$HERE/node.sh"
# shellcheck source=kueue.sh
. "$HERE/kueue.sh"
# shellcheck source=trainer.sh
. "$HERE/trainer.sh"
# shellcheck source=flux.sh
. "$HERE/flux.sh"
T0=$(date +%s)

for b in "$K8S_BIN/kube-apiserver" "$ETCD_BIN/etcd" "$KWOK_BIN/kwokctl" "$TO_BIN/training-operator.v1" \
         "$KR_BIN/ray-operator" "$KUBECTL"; do
  [ -x "$b" ] || { echo "missing $b: run 'make cluster-build' (hack/cluster/build.sh) first" >&2; exit 1; }
done
mkdir -p "$CLUSTER_DIR" "$LOGS" "$PIDS" "$SERVED_LOGS" "$CLUSTER_DIR/bin"
# serialise concurrent up.sh runs (e.g. parallel pytest sessions); children never inherit fd 9
exec 9>"$CLUSTER_DIR/.lock"; flock -w 600 9 || { echo "another up.sh holds $CLUSTER_DIR/.lock" >&2; exit 1; }

operators_ok() {
  pid_alive training-operator && pid_alive kuberay && pid_alive fake-dashboard &&
    http_ok "http://127.0.0.1:$TO_PROBE_PORT/readyz" && http_ok "http://127.0.0.1:$KR_PROBE_PORT/readyz"
}

# ---- fast path: our cluster is already up -------------------------------------------------------------------
if [ -f "$MARKER" ] && api_ready && operators_ok && { ! node_wanted || node_ok; } && { ! kueue_wanted || kueue_ok; } &&
   { ! trainer_wanted || trainer_ok; } && { ! flux_wanted || flux_ok; }; then
  node_wanted && ! node_images_current && node_images_update
  say "already running ($(( $(date +%s) - T0 ))s)"; echo "$KUBECONFIG_PATH"; exit 0
fi

moddir() { go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))'; }

# ---- control plane ------------------------------------------------------------------------------------------
if ! api_ready; then
  rm -f "$MARKER"
  if [ -d "$KWOK_WORKDIR/clusters/$CLUSTER_NAME" ] || compgen -G "$PIDS/*.pid" >/dev/null; then
    say "stale cluster state found: deleting it"
    "$HERE/down.sh" >/dev/null 2>&1 || true
    mkdir -p "$CLUSTER_DIR" "$LOGS" "$PIDS" "$SERVED_LOGS" "$CLUSTER_DIR/bin"
  fi
  KWOK_SRC=$(moddir "sigs.k8s.io/kwok@$KWOK_VERSION")
  CFG="$CLUSTER_DIR/kwokctl.yaml"
  {
    cat <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  kubeVersion: $K8S_VERSION
  kubeBinaryPrefix: $K8S_BIN
  kubectlBinary: $KUBECTL
  etcdBinary: $ETCD_BIN/etcd
  kwokControllerBinary: $KWOK_BIN/kwok
  bindAddress: 127.0.0.1
  kubeApiserverPort: $APISERVER_PORT
  etcdPort: $ETCD_PORT
  etcdPeerPort: $ETCD_PEER_PORT
  kubeControllerManagerPort: $KCM_PORT
  kubeSchedulerPort: $SCHED_PORT
  kwokControllerPort: $KWOK_PORT
  enableCRDs: [Logs, ClusterLogs]
componentsPatches:
- name: etcd
  extraArgs:
  - key: max-request-bytes
    value: "33554432"
# logs/exec on the real node: the apiserver authenticates to its kubelet with the cluster's admin certificate
- name: kube-apiserver
  extraArgs:
  - key: kubelet-client-certificate
    value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki/admin.crt
  - key: kubelet-client-key
    value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki/admin.key
  # the real node by its IP (its name does not resolve on the host); KWOK nodes have only Hostname=localhost
  - key: kubelet-preferred-address-types
    value: InternalIP,Hostname
# KWOK fakes only the nodes annotated kwok.x-k8s.io/node=fake (manifests/nodes.yaml): the real node and its
# pods belong to the kubelet (the later flag wins over kwokctl's --manage-all-nodes=true)
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
EOF
    # Any Stage in the config replaces ALL default stages, so KWOK's own node/pod stages are included here.
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
      echo '---'; cat "$KWOK_SRC/kustomize/stage/$f"
    done
    echo '---'; sed "s/__DEFAULT_DELAY_MS__/$POD_COMPLETE_DELAY_MS/" "$HERE/manifests/pod-finish-stages.yaml"
  } > "$CFG"
  say "creating control plane (kwokctl $KWOK_VERSION, kubernetes $K8S_VERSION, etcd $ETCD_VERSION)"
  # --kubeconfig: a scratch file of ours (default would be ~/.kube/config); kwokctl's own kubeconfig is copied
  # to the known path below.
  PATH="$TOOLS_LINK:$PATH" "$KWOK_BIN/kwokctl" --name "$CLUSTER_NAME" create cluster --config "$CFG" \
    --kubeconfig="$KWOKCTL_KUBECONFIG" --wait 5m > "$LOGS/kwokctl-create.log" 2>&1 9>&- || { cat "$LOGS/kwokctl-create.log" >&2; exit 1; }
  cp "$KWOK_WORKDIR/clusters/$CLUSTER_NAME/kubeconfig.yaml" "$KUBECONFIG_PATH"
  chmod 600 "$KUBECONFIG_PATH"
  for _ in $(seq 240); do api_ready && break; sleep 0.5; done
  api_ready || { echo "kube-apiserver not ready; see $KWOK_WORKDIR/clusters/$CLUSTER_NAME/logs/" >&2; exit 1; }
  say "control plane ready ($(( $(date +%s) - T0 ))s)"
fi

# ---- nodes, CRDs (idempotent, server-side apply) -------------------------------------------------------------
TO_SRC=$(moddir "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION")
KR_SRC=$(moddir "github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION")
k apply --server-side --field-manager=grpo-cluster -f "$HERE/manifests/nodes.yaml" >/dev/null
# big CRDs: server-side apply (client-side would exceed the 256 KiB last-applied annotation); etcd has
# --max-request-bytes=32MiB for the 1.35 MB RayJob CRD.
k apply --server-side --force-conflicts --field-manager=grpo-cluster \
  -f "$TO_SRC/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" \
  -f "$KR_SRC/config/crd/bases/ray.io_rayclusters.yaml" \
  -f "$KR_SRC/config/crd/bases/ray.io_rayjobs.yaml" \
  -f "$KR_SRC/config/crd/bases/ray.io_rayservices.yaml" >/dev/null
say "CRDs applied ($(( $(date +%s) - T0 ))s)"
k wait --for=condition=Established --timeout=60s crd/pytorchjobs.kubeflow.org crd/rayclusters.ray.io \
  crd/rayjobs.ray.io crd/rayservices.ray.io crd/logs.kwok.x-k8s.io crd/clusterlogs.kwok.x-k8s.io >/dev/null
say "CRDs established ($(( $(date +%s) - T0 ))s)"

# ---- default served log for namespace `default` (embedded demo) -----------------------------------------------
DEFAULT_LOG="$SERVED_LOGS/default-namespace-verl.log"
if [ ! -s "$DEFAULT_LOG" ]; then
  ROOT=$(cd "$HERE/../.." && pwd)
  PYBIN=python3; [ -x "$ROOT/.venv/bin/python" ] && PYBIN="$ROOT/.venv/bin/python"
  if [ -f "$ROOT/hack/simlog.py" ] && \
     "$PYBIN" "$ROOT/hack/simlog.py" --cri --val-before-train --steps 20 --n 2 --batch-size 8 \
       --gpus 2 -o "$DEFAULT_LOG.tmp" >/dev/null 2>&1 && \
     [ -s "$DEFAULT_LOG.tmp" ] && head -1 "$DEFAULT_LOG.tmp" | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T\S+ std(out|err) [FP] '; then
    mv "$DEFAULT_LOG.tmp" "$DEFAULT_LOG"; say "default log: hack/simlog.py"
  else
    rm -f "$DEFAULT_LOG.tmp"; python3 "$HERE/gen_verl_log.py" "$DEFAULT_LOG"; say "default log: gen_verl_log.py"
  fi
fi
k apply --server-side --field-manager=grpo-cluster -f - >/dev/null <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: grpo-default-namespace-log
spec:
  selector:
    matchNamespaces: ["default"]
  logs:
  - logsFile: $DEFAULT_LOG
    follow: true
EOF

# ---- training-operator v1 (PyTorchJob) --------------------------------------------------------------------------
if ! pid_alive training-operator; then
  k create namespace kubeflow --dry-run=client -o yaml | k apply -f - >/dev/null
  k -n kubeflow get secret training-operator-webhook-cert >/dev/null 2>&1 || \
    k -n kubeflow create secret generic training-operator-webhook-cert >/dev/null
  # The cert dir is hard-coded to /tmp/k8s-webhook-server/serving-certs in training-operator v1.9.0 pkg/cert.
  CERTS=/tmp/k8s-webhook-server/serving-certs; mkdir -p "$CERTS"
  ln -sfn "$TO_BIN/training-operator.v1" "$CLUSTER_DIR/bin/training-operator.v1"
  KUBECONFIG="$KUBECONFIG_PATH" MY_POD_NAMESPACE=kubeflow TMPDIR=/tmp start_bg training-operator \
    "$CLUSTER_DIR/bin/training-operator.v1" --kubeconfig="$KUBECONFIG_PATH" --enable-scheme=pytorchjob \
    --metrics-bind-address="127.0.0.1:$TO_METRICS_PORT" --health-probe-bind-address="127.0.0.1:$TO_PROBE_PORT" \
    --webhook-server-port="$TO_WEBHOOK_PORT" --zap-log-level=info --pytorch-init-container-image="$TOOLBOX_IMAGE" \
    --pytorch-init-container-template-file="$HERE/manifests/pytorch-init-container.yaml"
  # stand in for the kubelet: copy the rotator's keypair from the Secret into the cert directory
  crt=""
  for _ in $(seq 240); do
    crt=$(k -n kubeflow get secret training-operator-webhook-cert -o jsonpath='{.data.tls\.crt}' 2>/dev/null || true)
    [ -n "$crt" ] && break; pid_alive training-operator || break; sleep 0.5
  done
  [ -n "$crt" ] || { tail -20 "$LOGS/training-operator.log" >&2; echo "training-operator did not fill its cert secret" >&2; exit 1; }
  k -n kubeflow get secret training-operator-webhook-cert -o jsonpath='{.data.tls\.key}' | base64 -d > "$CERTS/tls.key.tmp"
  mv "$CERTS/tls.key.tmp" "$CERTS/tls.key"
  printf %s "$crt" | base64 -d > "$CERTS/tls.crt.tmp"; mv "$CERTS/tls.crt.tmp" "$CERTS/tls.crt"
fi

# ---- fake Ray dashboard + KubeRay operator --------------------------------------------------------------------
if ! pid_alive fake-dashboard; then
  cp "$HERE/fake_ray_dashboard.py" "$CLUSTER_DIR/bin/fake_ray_dashboard.py"
  GRPO_REAL_POD_CIDR=$PODS_CIDR GRPO_NODE_DNS=$DNS_NODE_IP:53 start_bg fake-dashboard python3 "$CLUSTER_DIR/bin/fake_ray_dashboard.py" "$DASHBOARD_PORT" "$FAKE_DASHBOARD_RUN_S"
fi
if ! pid_alive kuberay; then
  ln -sfn "$KR_BIN/ray-operator" "$CLUSTER_DIR/bin/ray-operator"
  # HTTP_PROXY: the dashboard client is a plain net/http client; Go never proxies loopback, so API traffic is direct.
  KUBECONFIG="$KUBECONFIG_PATH" HTTP_PROXY="http://127.0.0.1:$DASHBOARD_PORT" http_proxy= HTTPS_PROXY= https_proxy= \
    NO_PROXY=127.0.0.1,localhost no_proxy= start_bg kuberay \
    "$CLUSTER_DIR/bin/ray-operator" --kubeconfig="$KUBECONFIG_PATH" --enable-leader-election=false \
    --metrics-addr="127.0.0.1:$KR_METRICS_PORT" --health-probe-bind-address="127.0.0.1:$KR_PROBE_PORT" \
    --log-stdout-encoder=console
fi

k wait --for=condition=Ready --timeout=60s node/kwok-a100-0 node/kwok-a100-1 node/kwok-cpu-0 >/dev/null
for _ in $(seq 240); do operators_ok && break; sleep 0.5; done
operators_ok || { tail -n 20 "$LOGS/training-operator.log" "$LOGS/kuberay.log" >&2; echo "operators not ready" >&2; exit 1; }
say "nodes and operators ready ($(( $(date +%s) - T0 ))s)"

# ---- Kubeflow Trainer v2 + JobSet (when built: `hack/cluster/build.sh trainer jobset`) ----------------------------
# before Kueue, which enables an integration only for the CRDs it finds at start
if trainer_wanted && ! trainer_ok; then trainer_up; fi

# ---- Kueue (when built: `hack/cluster/build.sh kueue`) -------------------------------------------------------------
if kueue_wanted && ! kueue_ok; then kueue_up; fi

# ---- Flux (GitOps tests: GRPO_FLUX=1) -------------------------------------------------------------------------------
if flux_wanted && ! flux_ok; then flux_up; fi

# ---- the real node ------------------------------------------------------------------------------------------------
if node_wanted && ! node_ok; then node_up; fi

# ---- ownership marker: ConfigMap in kube-system + marker file with the same id ---------------------------------
CID=$(k -n kube-system get configmap "$OWNER_CM" -o jsonpath='{.data.cluster-id}' 2>/dev/null || true)
if [ -z "$CID" ]; then
  CID=$(python3 -c 'import uuid; print(uuid.uuid4())')
  k -n kube-system create configmap "$OWNER_CM" --from-literal=cluster-id="$CID" \
    --from-literal=cluster-dir="$CLUSTER_DIR" >/dev/null
  k -n kube-system label configmap "$OWNER_CM" app.kubernetes.io/managed-by=grpo-launcher-hack-cluster >/dev/null
fi
python3 - "$MARKER" <<EOF
import json, sys
json.dump({"cluster_id": "$CID", "name": "$CLUSTER_NAME", "kubeconfig": "$KUBECONFIG_PATH",
           "server": "https://127.0.0.1:$APISERVER_PORT", "tools_bin": "$TOOLS_LINK",
           "served_logs": "$SERVED_LOGS", "kubernetes": "$K8S_VERSION", "kwok": "$KWOK_VERSION",
           "training_operator": "$TRAINING_OPERATOR_VERSION", "kuberay": "$KUBERAY_VERSION", "kueue": "$(kueue_wanted && echo "$KUEUE_VERSION")",
           "trainer": "$(trainer_wanted && echo "$TRAINER_VERSION")", "jobset": "$(trainer_wanted && echo "$JOBSET_VERSION")",
           "pod_complete_delay_ms": $POD_COMPLETE_DELAY_MS}, open(sys.argv[1], "w"), indent=1)
EOF
say "up in $(( $(date +%s) - T0 ))s; export KUBECONFIG=$KUBECONFIG_PATH"
echo "$KUBECONFIG_PATH"
