# The CPU image for the local cluster (docker/Dockerfile.cpu, docker/README.md "CPU image for the local cluster"):
# built with buildah from a Debian rootfs (mmdebstrap) and a host wheelhouse, written as an OCI image layout to
# $(GRPO_CACHE)/images/verl-grpo-cpu.oci/. Needs root, buildah, skopeo, mmdebstrap, runc (and containerd for the smoke).
GRPO_CACHE ?= $(HOME)/.cache/grpo-launcher
export GRPO_CACHE

.PHONY: image-pins image-cpu image-cpu-import image-cpu-smoke image-test
image-cpu: ## Build the CPU image (buildah) into $(GRPO_CACHE)/images/verl-grpo-cpu.oci/; no-op when its inputs are unchanged
	hack/cluster/install-node-deps.sh buildah skopeo mmdebstrap
	hack/image/build.sh

image-pins: setup ## Resolve the CPU image's pins beyond requirements/verl-test.txt into docker/verl-cpu/image-pins.txt (needs PyPI; commit it)
	$(VPY) hack/image/pins.py . docker/verl-cpu/image-pins.txt

image-cpu-import: image-cpu ## Import the CPU image into containerd ADDRESS (default: the local node's socket); skips if present
	hack/image/import.sh $(ADDRESS)

image-cpu-smoke: image-cpu ## Throwaway containerd: import (cold + warm), `ctr run` checks (uid 1000, tini, verl/ray/torch/gloo), stop
	hack/image/ctr-smoke.sh

image-test: setup ## Check the CPU image (config, labels, paths, CPU training pieces, no proxy CA): pytest -m image
	$(VPY) -m pytest -q -m image tests/e2e/test_image_cpu.py
