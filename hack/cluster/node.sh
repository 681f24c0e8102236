# The real nodes of the local cluster (sourced by up.sh, down.sh and status.sh after common.sh).
#
# GRPO_REAL_NODES (default 2) CPU nodes `grpo-node-<i>` beside the KWOK nodes, so that a 2-node job (whose GPU
# pods repel each other) runs on two nodes as on a real cluster. Each node is a kubelet built from the same k8s.io/kubernetes module as
# the control plane with its own containerd 1.6 + runc (Debian), its own `bridge` CNI network (Debian's
# containernetworking-plugins) on bridge grpo<i> with pod CIDR 10.244.<i>.0/24 and node IP 10.244.<i>.1, and its
# own cgroup root; one kube-proxy (iptables mode: every pod's traffic crosses this host's netfilter) and one
# CoreDNS serve them all. All are host processes started from $CLUSTER_DIR so that down.sh can find and stop
# every one of them. Pods on different nodes reach each other through the host's routing between the bridges;
# Service IPs (the apiserver's default range 10.0.0.0/24) are routed by kube-proxy;
# `kube-dns` (ClusterIP $DNS_IP) is a selectorless Service whose EndpointSlice points at CoreDNS on the node IP.
# The pods are hermetic: no masquerading, no upstream DNS (names outside cluster.local are NXDOMAIN).
# Label grpo.launcher.io/node-kind=real and taint grpo.launcher.io/real-node=true:NoSchedule keep other pods off.

REAL_NODES=${GRPO_REAL_NODES:-2}
NODES_DIR="$CLUSTER_DIR/nodes"
DNS_IP=${GRPO_DNS_IP:-10.0.0.10}                    # inside the apiserver's default service range 10.0.0.0/24
PODS_CIDR=10.244.0.0/16                             # every node's pod CIDR is a /24 of it
NODE_LABEL_KEY=grpo.launcher.io/node-kind; NODE_LABEL_VALUE=real
NODE_TAINT=grpo.launcher.io/real-node=true:NoSchedule
KPROXY_HEALTHZ_PORT=${GRPO_KPROXY_HEALTHZ_PORT:-16256}; KPROXY_METRICS_PORT=${GRPO_KPROXY_METRICS_PORT:-16249}
COREDNS_HEALTH_PORT=${GRPO_COREDNS_HEALTH_PORT:-16280}; COREDNS_READY_PORT=${GRPO_COREDNS_READY_PORT:-16281}
# Container-log rotation, small on purpose (the kubelet's default is 10Mi): the follow tests prove no metric line is
# lost across rotations. Not smaller: the kubelet's follow stream can miss lines written between its last read of a
# file and the rotation (a real 25-step verl run rotated ~25 times at 16Ki and lost one step line).
CONTAINER_LOG_MAX_SIZE=${GRPO_CONTAINER_LOG_MAX_SIZE:-256Ki}
CONTAINER_LOG_MAX_FILES=${GRPO_CONTAINER_LOG_MAX_FILES:-3}
DNS_NODE_IP=10.244.0.1                              # CoreDNS listens on node 0's IP

# node_vars I: the per-node names, addresses, ports and paths of node I
node_vars() {
  NODE_I=$1
  NODE_NAME=grpo-node-$1
  NODE_DIR="$NODES_DIR/$1"
  NODE_BRIDGE=grpo$1
  NODE_IP=10.244.$1.1                               # the bridge's address: the node's InternalIP and pod gateway
  POD_CIDR=10.244.$1.0/24
  KUBELET_PORT=$(( 16250 + 10 * $1 )); KUBELET_HEALTHZ_PORT=$(( 16248 + 10 * $1 ))
  CONTAINERD_SOCK="$NODE_DIR/containerd.sock"
  CGROUP_ROOT=/grpo-node-$1
}
CPU_IMAGE_LAYOUT=${GRPO_CPU_IMAGE_LAYOUT:-$GRPO_CACHE/images/verl-grpo-cpu.oci}
CPU_IMAGE_REF=${GRPO_CPU_IMAGE:-ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu}   # as hack/image/common.sh
NODE_PKI="$KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki"
ctr_() { ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }   # the current node_vars' containerd

node_built() { [ -x "$NODE_BIN/kubelet" ] && [ -x "$NODE_BIN/kube-proxy" ] && [ -x "$COREDNS_BIN/coredns" ] &&
               [ -f "$PAUSE_DIR/pause.oci.tar" ] && [ -f "$TOOLBOX_DIR/toolbox.oci.tar" ] && command -v containerd >/dev/null && command -v runc >/dev/null; }

# GRPO_REAL_NODE: auto (default: start it when `make node-build` has built it), 1 (required), 0 (never).
node_wanted() {
  case ${GRPO_REAL_NODE:-auto} in
    0|false|no) return 1 ;;
    1|true|yes) node_built || { echo "GRPO_REAL_NODE=1 but the real node is not built: run 'make node-build'" \
                  "(and apt-get install containerd runc containernetworking-plugins iptables)" >&2; exit 1; } ;;
    *) node_built || return 1 ;;
  esac
}

node_ok() {
  local i
  pid_alive kube-proxy && pid_alive coredns && http_ok "http://127.0.0.1:$KPROXY_HEALTHZ_PORT/healthz" &&
    http_ok "http://127.0.0.1:$COREDNS_READY_PORT/ready" || return 1
  for i in $(seq 0 $(( REAL_NODES - 1 ))); do
    node_vars "$i"
    pid_alive "containerd-$i" && pid_alive "kubelet-$i" && http_ok "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz" &&
      [ "$(k get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] ||
      return 1
  done
}

_node_link() {  # run Debian's binaries through links under $CLUSTER_DIR: down.sh finds our processes by path
  ln -sfn "$1" "$CLUSTER_DIR/bin/$(basename "$1")"; echo "$CLUSTER_DIR/bin/$(basename "$1")"
}

_node_network() {
  modprobe br_netfilter 2>/dev/null || true
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
  fi
  grep -q "inet $NODE_IP/" <<<"$(ip addr show dev "$NODE_BRIDGE")" || ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  # Bridged pod-to-pod traffic must traverse iptables, or Service DNAT between two pods on the bridge breaks.
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1
  # Pods must not reach the kubelet's API on the node IP (only the apiserver on the host talks to it).
  iptables -C INPUT -i "$NODE_BRIDGE" -p tcp --dport "$KUBELET_PORT" -j DROP 2>/dev/null ||
    iptables -I INPUT -i "$NODE_BRIDGE" -p tcp --dport "$KUBELET_PORT" -j DROP
  # this node's cgroup root in every v1 hierarchy (a new cpuset cgroup starts with no CPUs: copy the parent's)
  local c
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c$CGROUP_ROOT" ] || mkdir -p "$c$CGROUP_ROOT" 2>/dev/null || true
  done
  if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset$CGROUP_ROOT/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset$CGROUP_ROOT/cpuset.mems"
  fi
  # The node's CPU weight against the host's other processes: on a real machine the kubelet's pods own its CPUs; here
  # they share two cores with the test lanes, each of whose sessions (autogroups) weighs as much as a whole node.
  # GRPO_NODE_CPU_SHARES (default 4096, 4 sessions' worth) gives the pods what their requests ask first; their CFS
  # quotas (the limits) still cap them, so the rest of the host keeps what the pods leave.
  if [ -f "/sys/fs/cgroup/cpu$CGROUP_ROOT/cpu.shares" ]; then
    echo "${GRPO_NODE_CPU_SHARES:-4096}" > "/sys/fs/cgroup/cpu$CGROUP_ROOT/cpu.shares" ||
      echo "warning: cannot set $CGROUP_ROOT's cpu.shares; its pods keep the default CPU weight" >&2
  fi
  mkdir -p "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam"
  write_file "$NODE_DIR/cni/net.d/10-grpo.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "grpo-pods-$NODE_I",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni/ipam",
              "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

_node_containerd() {
  local c="$NODE_DIR/containerd"
  mkdir -p "$c/root" "$c/state" "$c/opt" "$NODE_DIR/runc"
  cat > "$c/config.toml" <<EOF
# containerd 1.6 for the local cluster's real node $NODE_NAME (hack/cluster/node.sh); private root, state, socket.
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: without this runc cannot lower oom_score_adj and every sandbox fails
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/bin/runc"
        Root = "$NODE_DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
    max_conf_num = 1
EOF
  if ! pid_alive "containerd-$NODE_I"; then
    start_bg "containerd-$NODE_I" "$(_node_link "$(command -v containerd)")" --config "$c/config.toml"
  fi
  for _ in $(seq 120); do ctr_ version >/dev/null 2>&1 && break; pid_alive "containerd-$NODE_I" || break; sleep 0.25; done
  ctr_ version >/dev/null 2>&1 || { tail -20 "$LOGS/containerd-$NODE_I.log" >&2; echo "containerd of $NODE_NAME did not start" >&2; exit 1; }
  # Every image a pod uses is imported (no registry): the pause and toolbox images here, the CPU image in node_up.
  # (small: imported every time, so a rebuilt one replaces the old)
  ctr_ images import "$PAUSE_DIR/pause.oci.tar" >/dev/null
  ctr_ images import "$TOOLBOX_DIR/toolbox.oci.tar" >/dev/null
}

# The launcher's CPU image, (re)imported when `make image-cpu` wrote a different image than the one imported.
_node_image() {
  "$HERE/../image/import.sh" "$CONTAINERD_SOCK" >&2
  cp "$CPU_IMAGE_LAYOUT.inputs" "$NODE_DIR/cpu-image.inputs" 2>/dev/null || true
}

# The pause and toolbox images are in each node's containerd: the kubelet's image garbage collector removes unused
# images when the disk runs short (evictionHard imagefs.available, whatever the GC thresholds say; seen while an image
# build filled the disk), and with no registry nothing would bring the sandbox image back.
_node_small_images_present() {
  local have
  have=$(ctr_ images ls -q 2>/dev/null) || return 1
  grep -qxF "$PAUSE_IMAGE" <<<"$have" && grep -qxF "$TOOLBOX_IMAGE" <<<"$have"
}

# the CPU image is imported when the image changed, when the garbage collector took it, or when its top layer's
# snapshot is missing (a pod would fail with "failed to extract layer": the layer blobs are discarded after unpacking)
_node_cpu_image_current() {
  cmp -s "$CPU_IMAGE_LAYOUT.inputs" "$NODE_DIR/cpu-image.inputs" && grep -qxF "$CPU_IMAGE_REF" <<<"$(ctr_ images ls -q 2>/dev/null)" \
    && ctr_ snapshots info "$(python3 "$HERE/../image/layout.py" top "$CPU_IMAGE_LAYOUT")" >/dev/null 2>&1
}

node_images_current() {
  local i
  for i in $(seq 0 $(( REAL_NODES - 1 ))); do
    node_vars "$i"
    _node_small_images_present || return 1
    [ -f "$CPU_IMAGE_LAYOUT.inputs" ] || continue      # nothing built: nothing to import
    _node_cpu_image_current || return 1
  done
}

# _node_clone_root: give this node (node_vars set, its containerd stopped) node 0's images by hard links (node 0's
# containerd stopped too, so its databases are consistent): blobs and unpacked layers are immutable files, so the
# two roots share them (6 GB once, not per node, and seconds instead of a 2.5-minute import); the databases are
# real copies. A container's writable layer is always a new snapshot directory of its own node.
_node_clone_root() {
  local src="$NODES_DIR/0/containerd/root" dst="$NODE_DIR/containerd/root" d
  rm -rf --one-file-system "$dst"; mkdir -p "$dst"
  for d in io.containerd.content.v1.content io.containerd.snapshotter.v1.overlayfs; do cp -al "$src/$d" "$dst/"; done
  mkdir -p "$dst/io.containerd.metadata.v1.bolt"
  cp "$src/io.containerd.metadata.v1.bolt/meta.db" "$dst/io.containerd.metadata.v1.bolt/meta.db"
  cp --remove-destination "$src/io.containerd.snapshotter.v1.overlayfs/metadata.db" \
    "$dst/io.containerd.snapshotter.v1.overlayfs/metadata.db"
  cp "$NODES_DIR/0/cpu-image.inputs" "$NODE_DIR/cpu-image.inputs"
}

# _node_images_initial: before any kubelet runs: import the CPU image into node 0, clone it to the others.
_node_images_initial() {
  local i todo=()
  [ -f "$CPU_IMAGE_LAYOUT/index.json" ] && [ -x "$HERE/../image/import.sh" ] || {
    say "no CPU image at $CPU_IMAGE_LAYOUT (make image-cpu): the real nodes can run no launcher pod yet"; return 0; }
  node_vars 0
  _node_cpu_image_current || _node_image
  for i in $(seq 1 $(( REAL_NODES - 1 ))); do
    node_vars "$i"; _node_cpu_image_current || todo+=("$i")
  done
  [ ${#todo[@]} -eq 0 ] && return 0
  say "cloning node 0's images to node(s) ${todo[*]} (hard links)"
  for i in 0 "${todo[@]}"; do stop_pid "containerd-$i"; done
  for i in "${todo[@]}"; do node_vars "$i"; _node_clone_root; done
  for i in 0 "${todo[@]}"; do node_vars "$i"; _node_containerd; done
}

node_images_update() {
  local i
  for i in $(seq 0 $(( REAL_NODES - 1 ))); do
    node_vars "$i"
    _node_small_images_present || { say "$NODE_NAME: re-importing the pause and toolbox images (garbage-collected)"
      ctr_ images import "$PAUSE_DIR/pause.oci.tar" >/dev/null; ctr_ images import "$TOOLBOX_DIR/toolbox.oci.tar" >/dev/null; }
    [ -f "$CPU_IMAGE_LAYOUT.inputs" ] || continue
    _node_cpu_image_current || { say "$NODE_NAME: importing the CPU image"; _node_image; }
  done
}

_node_kubelet() {
  mkdir -p "$NODE_DIR/kubelet" "$NODE_DIR/pod-logs" "$NODE_DIR/pki"
  : > "$NODE_DIR/resolv.conf"    # no upstream: pods resolve cluster names only
  # the node object's own lease and status come from this kubelet; its cgroups, logs and state are private
  write_file "$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 on these machines: kubelet 1.35 refuses it unless told (and containerd 1.6 cannot report a driver)
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
# the apiserver calls the kubelet with the cluster's admin client certificate (up.sh's apiserver patch)
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $NODE_PKI/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: $NODE_DIR/resolv.conf
podLogsDir: $NODE_DIR/pod-logs
containerLogMaxSize: $CONTAINER_LOG_MAX_SIZE
containerLogMaxFiles: $CONTAINER_LOG_MAX_FILES
containerLogMonitorInterval: 3s
failSwapOn: false
maxPods: 40
podPidsLimit: 4096
serializeImagePulls: false
# imported images cannot be pulled again: never garbage-collect them; evict only when really short
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# absolute thresholds: the disk is shared with builds and caches; percentages of a large disk would evict early
evictionHard: {memory.available: 200Mi, nodefs.available: 1Gi, imagefs.available: 1Gi, nodefs.inodesFree: 1%}
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
EOF
  if ! pid_alive "kubelet-$NODE_I"; then
    ln -sfn "$NODE_BIN/kubelet" "$CLUSTER_DIR/bin/kubelet"
    start_bg "kubelet-$NODE_I" "$CLUSTER_DIR/bin/kubelet" --config="$NODE_DIR/kubelet.yaml" --kubeconfig="$KUBECONFIG_PATH" \
      --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --root-dir="$NODE_DIR/kubelet" --cert-dir="$NODE_DIR/pki" \
      --node-labels="$NODE_LABEL_KEY=$NODE_LABEL_VALUE" --register-with-taints="$NODE_TAINT" --v=1
  fi
}

# Every kubelet's device-plugin registry is /var/lib/kubelet/device-plugins/kubelet.sock, whatever its --root-dir (a
# constant in the kubelet), and each removes that file, then binds it. Two kubelets starting at once can both remove
# it before either binds; the second bind then fails ("address already in use"), and that kubelet exits (s8,
# 2026-12-06: kubelet-1 died at start, the real nodes were never ready, and a third of the cluster tests errored). So
# the next kubelet starts only once this one holds the socket; it then takes the path over (no device plugins here).
_node_kubelet_bound() {
  local pid; pid=$(cat "$PIDS/kubelet-$NODE_I.pid")
  for _ in $(seq 480); do
    ss -xlp 2>/dev/null | grep -F /var/lib/kubelet/device-plugins/kubelet.sock | grep -q "pid=$pid," && return 0
    pid_alive "kubelet-$NODE_I" || break
    sleep 0.25
  done
  tail -n 30 "$LOGS/kubelet-$NODE_I.log" >&2; echo "kubelet-$NODE_I did not bind its device-plugin socket" >&2; exit 1
}

_node_proxy_dns() {
  write_file "$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $KUBECONFIG_PATH}
hostnameOverride: grpo-node-0
clusterCIDR: $PODS_CIDR
healthzBindAddress: 127.0.0.1:$KPROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$KPROXY_METRICS_PORT
nodePortAddresses: ["$PODS_CIDR"]
# leave the host's conntrack sysctls alone
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  if ! pid_alive kube-proxy; then
    ln -sfn "$NODE_BIN/kube-proxy" "$CLUSTER_DIR/bin/kube-proxy"
    start_bg kube-proxy "$CLUSTER_DIR/bin/kube-proxy" --config="$NODE_DIR/kube-proxy.yaml"
  fi
  write_file "$NODE_DIR/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $DNS_NODE_IP
    errors
    health 127.0.0.1:$COREDNS_HEALTH_PORT
    ready 127.0.0.1:$COREDNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG_PATH
        pods insecure
        ttl 5
    }
    cache 5
    loadbalance
}
.:53 {
    bind $DNS_NODE_IP
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
  if ! pid_alive coredns; then
    ln -sfn "$COREDNS_BIN/coredns" "$CLUSTER_DIR/bin/coredns"
    start_bg coredns "$CLUSTER_DIR/bin/coredns" -conf "$NODE_DIR/Corefile"
  fi
  k apply --server-side --field-manager=grpo-cluster -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS, app.kubernetes.io/managed-by: grpo-launcher-hack-cluster}
spec:
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: grpo-launcher-hack-cluster}
addressType: IPv4
endpoints:
- addresses: ["$DNS_NODE_IP"]
  conditions: {ready: true}
  nodeName: grpo-node-0
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF
}

node_up() {
  local t0 i fresh; t0=$(date +%s)
  say "real nodes: starting $REAL_NODES (each: containerd, CNI bridge, kubelet), kube-proxy, CoreDNS"
  for i in $(seq 0 $(( REAL_NODES - 1 ))); do
    node_vars "$i"; _node_network; _node_containerd
  done
  pid_alive kubelet-0 || _node_images_initial
  for i in $(seq 0 $(( REAL_NODES - 1 ))); do
    node_vars "$i"; fresh=; pid_alive "kubelet-$i" || fresh=1
    _node_kubelet; [ -z "$fresh" ] || _node_kubelet_bound
  done
  _node_proxy_dns
  for _ in $(seq 240); do node_ok && break; sleep 0.5; done
  node_ok || { tail -n 30 "$LOGS"/kubelet-*.log "$LOGS/kube-proxy.log" "$LOGS/coredns.log" >&2
               echo "real nodes not ready" >&2; exit 1; }
  say "real nodes ready ($(( $(date +%s) - t0 ))s)"
}

# Stop everything the node started, in the order that leaves nothing behind: the kubelet (no restarts), every
# container and sandbox (their shims exit), containerd, stray shims of our socket, kube-proxy's rules, CoreDNS,
# then mounts (netns, overlay snapshots, emptyDir tmpfs), the bridge and the pods' cgroups.
node_down() {
  local i d
  for d in "$NODES_DIR"/*/; do
    [ -d "$d" ] || continue
    i=$(basename "$d"); node_vars "$i"; _node_down_one
  done
  stop_pid kube-proxy
  stop_pid coredns
  [ -x "$NODE_BIN/kube-proxy" ] && "$NODE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  # the kubelet's own chains (KUBE-FIREWALL, canaries): kube-proxy --cleanup leaves them
  local ipt t
  for ipt in iptables ip6tables; do
    $ipt -D INPUT -j KUBE-FIREWALL 2>/dev/null; $ipt -D OUTPUT -j KUBE-FIREWALL 2>/dev/null
    $ipt -F KUBE-FIREWALL 2>/dev/null; $ipt -X KUBE-FIREWALL 2>/dev/null
    for t in filter nat mangle; do $ipt -t $t -F KUBE-KUBELET-CANARY 2>/dev/null; $ipt -t $t -X KUBE-KUBELET-CANARY 2>/dev/null; done
    $ipt -t mangle -X KUBE-IPTABLES-HINT 2>/dev/null
  done
  return 0
}

_node_down_one() {
  stop_pid "kubelet-$NODE_I"
  if [ -S "$CONTAINERD_SOCK" ] && pid_alive "containerd-$NODE_I"; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$t" >/dev/null 2>&1 || true; done
  fi
  stop_pid "containerd-$NODE_I"
  local p
  for p in $(pgrep -f "containerd-shim.* -address $CONTAINERD_SOCK" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  iptables -D INPUT -i "$NODE_BRIDGE" -p tcp --dport "$KUBELET_PORT" -j DROP 2>/dev/null || true
  # mounts under the node dir, deepest first
  awk -v d="$NODE_DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && ip link delete "$NODE_BRIDGE" 2>/dev/null
  # pod veths go with their netns; the node's cgroups are removed once empty
  local cg
  for cg in /sys/fs/cgroup/*"$CGROUP_ROOT"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  # pod state goes; containerd's root (the imported images, like a node's image cache) stays for the next up
  rm -rf --one-file-system "$NODE_DIR/cni/ipam" "$NODE_DIR/kubelet" "$NODE_DIR/pod-logs" "$NODE_DIR/pki" \
    "$NODE_DIR/containerd/state" "$NODE_DIR/runc" "$CONTAINERD_SOCK" "$CONTAINERD_SOCK.ttrpc"
  return 0
}

node_status() {
  local n i
  for i in $(seq 0 $(( REAL_NODES - 1 ))); do
    for n in "containerd-$i" "kubelet-$i"; do
      if pid_alive "$n"; then echo "$(printf '%-18s' "$n:") running pid $(cat "$PIDS/$n.pid") (log $LOGS/$n.log)"
      else echo "$(printf '%-18s' "$n:") NOT running"; fi
    done
  done
  for n in kube-proxy coredns; do
    if pid_alive "$n"; then echo "$(printf '%-18s' "$n:") running pid $(cat "$PIDS/$n.pid") (log $LOGS/$n.log)"
    else echo "$(printf '%-18s' "$n:") NOT running"; fi
  done
}
