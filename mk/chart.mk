# Helm chart charts/grpo-exp3 and the GitOps manifests/: both generated from the experiment spec and
# kept in lockstep with `launcher render` (tests/test_chart*.py, tests/render/test_manifests.py).
GRPO_CACHE ?= $(HOME)/.cache/grpo-launcher
TOOLS_BIN ?= $(or $(GRPO_TOOLS_BIN),$(GRPO_CACHE)/bin/tools)
HELM := $(TOOLS_BIN)/helm
CHART_DIR := charts/grpo-exp3
# Overrides that `make chart-lint` renders besides the defaults (one `helm template` each).
CHART_LINT_MATRIX := \
  "--set backend=rayjob" \
  "--set resources.nodes=2" \
  "--set backend=rayjob --set resources.nodes=2" \
  "--set backend=trainjob" \
  "--set backend=trainjob --set resources.nodes=2 --set scheduling.queue=team-a --set run_policy.ttl_seconds_after_finished=3600" \
  "--set scheduling.queue=team-a" \
  "--set storage.create=true --set storage.claim_name=grpo-data --set storage.access_mode=ReadWriteMany --set resources.nodes=2" \
  "--set scheduling.tolerations[0].key=nvidia.com/gpu --set scheduling.tolerations[0].operator=Exists --set scheduling.tolerations[0].effect=NoSchedule" \
  "--set run_policy.ttl_seconds_after_finished=3600 --set run_policy.active_deadline_seconds=86400" \
  "--set workload=smoke --set resources.gpus_per_node=0 --set backend=rayjob --set resources.nodes=2" \
  "--set resources.gpus_per_node=0 --set image=ghcr.io/grpo-launcher/verl-grpo:0.1.0-cpu --set actor.strategy=fsdp2 --set actor.use_remove_padding=false --set model.path=builtin:tiny-qwen2 --set reward.function.path=pkg://grpo_verl_cpu.reward --set backend=rayjob"

.PHONY: chart chart-check chart-lint manifests manifests-check

$(HELM):
	@echo "helm not found at $(HELM): run \`make tools\`" >&2; exit 1

chart: ## Regenerate the chart's values.yaml, values.schema.json, Chart.yaml, _generated.tpl from the spec
	$(VPY) hack/gen_chart.py chart

chart-check: ## Fail when the chart's generated files are stale (fix: make chart)
	$(VPY) hack/gen_chart.py check

chart-lint: $(HELM) ## helm lint --strict, then helm template with the defaults and a matrix of overrides
	$(HELM) lint --strict $(CHART_DIR)
	$(HELM) template grpo-exp3 $(CHART_DIR) >/dev/null
	@set -e; for o in $(CHART_LINT_MATRIX); do echo "helm template $$o"; eval $(HELM) lint --strict $(CHART_DIR) $$o >/dev/null; eval $(HELM) template grpo-exp3 $(CHART_DIR) $$o >/dev/null; done

manifests: ## Regenerate manifests/<exp>/ (launcher render --gitops + kustomization.yaml)
	$(VPY) hack/gen_manifests.py

manifests-check: ## Fail when manifests/ is stale: renders into a temp dir and diffs (fix: make manifests)
	$(VPY) hack/gen_manifests.py --check
