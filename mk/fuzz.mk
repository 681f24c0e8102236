# The deep fuzz: the same atheris tests the unit lane runs (tests/spec/test_hostile_input.py), at the issue's floor
# of a million log inputs and ten thousand configs. The unit lane runs them at a CI-sized budget (the module's
# defaults, 200,000 log inputs): the log parser's edges are all covered within its first ~20,000 inputs, while new
# features keep trickling in, and the million took 490-650 s of the lane beside the cluster tests.
FUZZ_LOG_RUNS ?= 1000000
FUZZ_CONFIG_RUNS ?= 10000

.PHONY: fuzz
fuzz: setup ## Deep fuzz: the log parser (FUZZ_LOG_RUNS, 1,000,000) and the config loader (FUZZ_CONFIG_RUNS, 10,000)
	FUZZ_LOG_RUNS=$(FUZZ_LOG_RUNS) FUZZ_CONFIG_RUNS=$(FUZZ_CONFIG_RUNS) \
		$(VPY) -m pytest -q -p no:cacheprovider tests/spec/test_hostile_input.py -k fuzz -s --durations=2  # -s: each prints "Done N runs"
