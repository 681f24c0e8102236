# grpo-launcher: every target CI runs is here; `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
CONFIG ?= configs/grpo-exp3.yaml
export PYTHONUNBUFFERED := 1

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z0-9_.-]+:.*?## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

.PHONY: setup
setup: $(VPY) ## Create .venv and install the launcher with its test extras
	$(VPY) -m pip install -q -e '.[test]'

.PHONY: test
test: ## Everything CI runs (.ci/run): installs, generated-file checks, scans, then the whole pytest suite
	$(MAKE) setup
	# Three independent installs at once (Go builds are CPU-bound; the image and verl env mostly download and
	# unpack): about 10 minutes less on a new machine than in sequence (bench/RESULTS.md "CI total").
	$(MAKE) -j3 --output-sync=target verl-env image-cpu cluster-bins
	$(MAKE) chart-check manifests-check chart-lint scan
	$(VPY) -m pytest -q --durations=15
	$(MAKE) client-floor-test  # once, after the suite: the cluster verbs with the oldest allowed kubernetes client

.PHONY: unit
unit: setup ## Unit and property tests only (no cluster, no verl, no fuzzing)
	$(VPY) -m pytest -q -m 'not cluster and not verl and not slow'

.PHONY: golden
golden: setup ## Regenerate tests/golden/ after an intended rendering change (review the diff)
	UPDATE_GOLDEN=1 $(VPY) -m pytest -q tests/test_render_golden.py -k test_golden

.PHONY: run
run: setup ## Install everything and run grpo-exp3 end to end (embedded local cluster when KUBECONFIG is unset)
	VPY=$(abspath $(VPY)) hack/run-main-job.sh $(CONFIG)

-include mk/*.mk
