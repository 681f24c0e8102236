# grpo-launcher: every target CI runs is here; `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
# `make run CONFIG=...` runs that config; unset, hack/run-main-job.sh picks grpo-exp3-cpu (real node) or grpo-exp3.
CONFIG ?=
# pytest-xdist workers for the tests that need no cluster. `make test` runs them beside the cluster tests, which mostly
# wait on pods and controllers (load average 0.6-0.9 on CI's 2 cores): one worker, so the e2e tests keep a core.
TEST_WORKERS ?= 1
# pytest-xdist workers for the cluster tests: they mostly wait (pods, controllers, KWOK's simulated runs), so four run
# at once on the shared control plane (tests/conftest.py's scheduler: each module whole, the real verl runs on a worker
# of their own, the real-node tests with small pods on a second one beside them, the KWOK-node tests on the others).
E2E_WORKERS ?= 4
# Run alone, after the shared lane: a lost real node (it would take other tests' pods with it), then the API server's
# restart (it takes the shared control plane down).
E2E_LAST := tests/e2e/test_zz_real_node_lost_e2e.py tests/e2e/test_zz_apiserver_restart_e2e.py
export PYTHONUNBUFFERED := 1
# A test lane's command, timed: with GRPO_TIMINGS_FILE set (.ci/run sets it) its time goes into CI's closing table.
TIMED := hack/ci/timed.sh test

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z0-9_.-]+:.*?## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

.PHONY: setup
setup: $(VPY) ## Create .venv and install the launcher with its test extras
	# The tracking clients at the image's versions (docker/requirements-tracking.lock), not whatever PyPI has newest
	# today: tests/test_tracking_lock.py checks the image's pins against their metadata.
	grep -E '^[A-Za-z0-9][A-Za-z0-9._-]*==' docker/requirements-tracking.lock | sed 's/[ \\].*//' > $(VENV)/tracking-constraints.txt
	$(VPY) -m pip install -q -e '.[test]' -c $(VENV)/tracking-constraints.txt

.PHONY: test
test: ## Everything CI runs (.ci/run): installs, generated-file checks, scans, then the whole pytest suite
	hack/ci/timed.sh installs setup $(MAKE) setup
	# Three independent installs at once (Go builds are CPU-bound; the image and verl env mostly download and
	# unpack): about 10 minutes less on a new machine than in sequence (bench/RESULTS.md "CI total"). hack/lanes.py runs
	# them: their output in log files (a failed one's printed in full), a progress line each, times in GRPO_TIMINGS_FILE.
	$(PY) hack/lanes.py installs verl-env='$(MAKE) -s verl-env' image-cpu='$(MAKE) -s image-cpu' \
	  cluster-bins='$(MAKE) -s cluster-bins'
	# Two lanes at once (bench/RESULTS.md "CI total"): the checks, scans and the tests that need no cluster (CPU-bound)
	# beside the cluster tests, which mostly wait. Whole lines: a cut-off run still shows how far each got.
	$(MAKE) -j2 --output-sync=line test-checks-and-unit test-cluster

.PHONY: test-checks-and-unit test-cluster test-cluster-shared
test-checks-and-unit: ## (part of `make test`, after its installs) generated-file checks, chart-lint, scan, then every test that needs no cluster
	hack/cluster/install-node-deps.sh zsh fish  # tests/cli/test_cli_habits.py parses the zsh/fish completion scripts
	# At a lower CPU priority (nice 5: a quarter of a contended core, not starved): this lane ends long before the
	# cluster lane, whose real-node worker (real verl training in the kubelet's pods, nice 0) is CI's critical path.
	$(TIMED) checks nice -n 5 $(MAKE) chart-check manifests-check chart-lint scan
	$(TIMED) unit nice -n 5 $(VPY) -m pytest -q -n $(TEST_WORKERS) -m 'not cluster' --durations=15

test-cluster: ## (part of `make test`, after its installs) every test that needs the local cluster, which the session fixture starts
	# The cluster tests on E2E_WORKERS workers beside the cluster verbs with the oldest allowed kubernetes client; then,
	# alone, the tests that take a node or the shared API server down.
	$(MAKE) -j2 --output-sync=line test-cluster-shared client-floor-test
	$(TIMED) cluster-last $(VPY) -m pytest -q -m cluster $(E2E_LAST)

test-cluster-shared: ## The cluster tests that can share the control plane, on E2E_WORKERS pytest-xdist workers
	$(TIMED) cluster-shared $(VPY) -m pytest -q -m cluster -n $(E2E_WORKERS) --dist loadfile $(addprefix --ignore=,$(E2E_LAST)) --durations=40

.PHONY: unit
unit: setup tools ## Unit and property tests: no cluster, no verl, no CPU image, no fuzzing (needs helm/kubectl from `make tools`, and Go)
	# Go: the render tests validate against the operators' CRDs and Kubernetes' OpenAPI, read from their Go
	# modules (`go mod download`, tests/crd_schema.py). Modules marked verl/cluster/image are not even imported
	# (tests/conftest.py), so a machine without verl, torch or the image collects cleanly.
	@command -v go >/dev/null || { echo "make unit: needs Go on PATH (tests/crd_schema.py reads the CRDs from Go modules): https://go.dev/dl/" >&2; exit 2; }
	$(VPY) -m pytest -q -m 'not cluster and not verl and not slow and not image'

.PHONY: quick
quick: setup verl-env cluster-bins ## After an edit: every test that needs no real node, the KWOK cluster's included (no fuzzing, no CPU image)
	# What a change to the launcher most often breaks, without the real node's verl runs (`make test`'s critical path)
	# or the tests that take the shared control plane down (E2E_LAST). Two workers, each module whole (tests/conftest.py).
	$(VPY) -m pytest -q -n 2 --dist loadfile -m 'not realnode and not slow and not image' $(addprefix --ignore=,$(E2E_LAST))

.PHONY: golden
golden: setup ## Regenerate tests/golden/ after an intended rendering change (review the diff)
	UPDATE_GOLDEN=1 $(VPY) -m pytest -q tests/render/test_render_golden.py -k test_golden

.PHONY: run
run: ## Run the main job end to end, installing the rest: grpo-exp3-cpu for real on the embedded cluster's real node (KUBECONFIG unset; needs Go 1.26+, npm), else grpo-exp3; CONFIG=... to choose
	# Prerequisites first: a missing Go or npm is reported before anything is installed or built.
	PY=$(PY) hack/run-main-job.sh --check-prereqs
	$(MAKE) setup
	PY=$(PY) VPY=$(abspath $(VPY)) hack/run-main-job.sh $(CONFIG)

-include mk/*.mk
