# Static security scans (checkov; hadolint runs in docker-lint). Skips are listed, with reasons, in .checkov.yaml.
SCAN_VENV ?= .cache/scan
CHECKOV := $(SCAN_VENV)/bin/checkov
CHECKOV_VERSION ?= 3.3.30

$(CHECKOV):
	$(PY) -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install -q --upgrade pip
	$(SCAN_VENV)/bin/python -m pip install -q "checkov==$(CHECKOV_VERSION)"

.PHONY: scan
scan: setup tools docker-lint $(CHECKOV) ## checkov over chart, rendered manifests, manifests/ and Dockerfile (+ hadolint)
	VPY=$(abspath $(VPY)) hack/scan/run.sh $(abspath $(CHECKOV)) $${GRPO_CACHE:-$$HOME/.cache/grpo-launcher}/bin/tools
