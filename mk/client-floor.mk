# The oldest kubernetes client pyproject.toml allows, proven on the local cluster (README "Supported kubernetes
# client"). .venv-floor holds the launcher (editable) with kubernetes pinned to the floor; the e2e tests spawn
# `python -m launcher` with the interpreter that runs pytest (tests/e2e/launcher_helpers.py: PY = sys.executable),
# so every launcher verb they run talks to the cluster through the floor client.

KUBERNETES_FLOOR ?= 30.1.0
FLOOR_VENV ?= .venv-floor
FLOOR_PY := $(FLOOR_VENV)/bin/python
# The REST seam and connect() without a cluster (exec plugin, in-cluster, transport errors), then every cluster
# verb: submit/status/list/logs/wait/delete/doctor under the rendered RBAC (a ServiceAccount token over TLS),
# and doctor plus submit --follow with the admin kubeconfig (client certificate).
FLOOR_TESTS ?= tests/kube/test_kube_client.py tests/kube/test_kube_connect.py tests/e2e/test_rbac_e2e.py \
	tests/e2e/test_doctor_e2e.py::test_static_checks_green_for_grpo_exp3 \
	tests/e2e/test_submit_e2e.py::test_submit_follow_pytorchjob_to_success_with_exact_metrics

$(FLOOR_PY): pyproject.toml
	$(PY) -m venv $(FLOOR_VENV)
	$(FLOOR_PY) -m pip install -q --upgrade pip
	$(FLOOR_PY) -m pip install -q -e . "kubernetes==$(KUBERNETES_FLOOR)" "pytest>=8" "pytest-timeout>=2.3"
	touch $(FLOOR_PY)

.PHONY: client-floor-test
client-floor-test: $(FLOOR_PY) ## Cluster verbs on the local cluster with the oldest allowed kubernetes client (.venv-floor)
	$(FLOOR_PY) -c "import kubernetes, sys; v = kubernetes.__version__; sys.exit(0 if v == '$(KUBERNETES_FLOOR)' else f'.venv-floor has kubernetes {v}, not $(KUBERNETES_FLOOR)')"
	$(TIMED) client-floor $(FLOOR_PY) -m pytest -q -p no:cacheprovider --durations=5 $(FLOOR_TESTS)
