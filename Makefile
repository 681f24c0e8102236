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

.PHONY: unit
unit: setup ## Unit and property tests (no cluster)
	$(VPY) -m pytest -q -m 'not cluster and not verl'

-include mk/*.mk
