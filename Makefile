# airflow-provider-disttrain: one entry point for setting up, testing and demoing the provider.
#   make demo   - venv + local cluster + example 1 end to end with `airflow dags test`
#   make test   - venv + local cluster + lint + unit and integration tests (what CI runs)
SHELL := /bin/bash
.DEFAULT_GOAL := help

REPO_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
PYTHON ?= python3.11
VENV := $(REPO_ROOT)/.venv
VENV_PY := $(VENV)/bin/python
UV := $(shell command -v uv 2>/dev/null)
export DEVCLUSTER_DIR ?= $(REPO_ROOT)/.devcluster
# Each step's wall time (dev/step.sh): printed as it ends, and listed by .ci/run when STEP_TIMES names a file.
export STEP_TIMES_DIR ?= $(REPO_ROOT)/.devsteps
STEP := $(REPO_ROOT)/dev/step.sh

include $(REPO_ROOT)/dev/cluster.mk
include $(REPO_ROOT)/dev/airflow.mk

.PHONY: help venv lint typecheck unit-test lowest-deps-test newest-airflow-test integration-test newest-airflow-integration-test test demo bench clean

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@$(STEP) begin venv
	@echo "==> Python environment ($(VENV))"
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	@uv venv --quiet --allow-existing -p $(PYTHON) $(VENV)
	@uv pip install --quiet -p $(VENV_PY) -e ".[openlineage,test,browser-test,fab-auth-test,docs]"  # [openlineage]: the local Airflow deployment reports lineage
	@touch $@
	@$(STEP) end venv

venv: $(VENV)/.installed ## Create .venv with the provider, Airflow and the test tools

lint: venv ## ruff check, format check, mypy on the package, and the docs site (mkdocs build --strict)
	@$(STEP) begin lint
	@$(VENV)/bin/ruff check airflow_provider_disttrain tests example_dags bench training dev
	@$(VENV)/bin/ruff format --check airflow_provider_disttrain tests example_dags bench training dev
	@$(VENV)/bin/mypy
	@$(VENV)/bin/mkdocs build --strict  # the docs site (mkdocs.yml): a broken link or any warning fails, offline
	@$(STEP) end lint

typecheck: venv ## mypy on the package (it ships py.typed)
	@$(VENV)/bin/mypy

unit-test: venv ## Unit tests only (no cluster)
	@$(STEP) begin unit
	@$(VENV)/bin/pytest tests -m "not integration and not e2e" -q -p no:cacheprovider -n auto --dist worksteal --durations=25
	@$(STEP) end unit

# The lowest versions pyproject.toml declares, for the provider's own dependencies (uv's lowest-direct
# resolution; transitive ones resolve as usual, within .ci/lowest-deps-constraints.txt), in a venv of
# their own, so the declared bounds stay true.
VENV_LOWEST := $(REPO_ROOT)/.venv-lowest

$(VENV_LOWEST)/.installed: pyproject.toml .ci/lowest-deps-constraints.txt
	@$(STEP) begin venv-lowest
	@echo "==> Python environment with the lowest declared versions ($(VENV_LOWEST))"
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	@uv venv --quiet --allow-existing -p $(PYTHON) $(VENV_LOWEST)
	@uv pip install --quiet -p $(VENV_LOWEST)/bin/python --resolution lowest-direct \
		-c .ci/lowest-deps-constraints.txt -e ".[test]"
	@uv pip list -p $(VENV_LOWEST)/bin/python 2>/dev/null | grep -iE '^(apache-airflow|apache-airflow-core|apache-airflow-task-sdk|apache-airflow-providers-cncf-kubernetes|kubernetes|kubernetes-asyncio|pyyaml|tenacity) '
	@touch $@
	@$(STEP) end venv-lowest

lowest-deps-test: $(VENV_LOWEST)/.installed ## Unit tests on the lowest versions pyproject declares (.venv-lowest)
	@$(STEP) begin unit-lowest
	@$(VENV_LOWEST)/bin/pytest tests -m "not integration and not e2e" -q -p no:cacheprovider -n auto --dist worksteal --durations=25
	@$(STEP) end unit-lowest

# The newest Airflow the package index serves (AIRFLOW_NEXT, a pre-release while there is one), in a venv
# of its own: the unit tests run there too, and those that need its features (Task Loops, Airflow 3.4)
# run only there. Pinning Airflow itself is what lets uv take its pre-release (and the exact
# apache-airflow-core/task-sdk it pins); everything else, the providers included, resolves to finals as usual.
AIRFLOW_NEXT ?= 3.4.0b2
VENV_NEXT := $(REPO_ROOT)/.venv-airflow-next

$(VENV_NEXT)/.installed-$(AIRFLOW_NEXT): pyproject.toml
	@$(STEP) begin venv-airflow-next
	@echo "==> Python environment with apache-airflow==$(AIRFLOW_NEXT) ($(VENV_NEXT))"
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	@uv venv --quiet --allow-existing -p $(PYTHON) $(VENV_NEXT)
	@uv pip install --quiet -p $(VENV_NEXT)/bin/python "apache-airflow==$(AIRFLOW_NEXT)" -e ".[test]"
	@uv pip list -p $(VENV_NEXT)/bin/python 2>/dev/null | grep -iE '^(apache-airflow|apache-airflow-core|apache-airflow-task-sdk|apache-airflow-providers-cncf-kubernetes) '
	@rm -f $(VENV_NEXT)/.installed-*
	@touch $@
	@$(STEP) end venv-airflow-next

newest-airflow-test: $(VENV_NEXT)/.installed-$(AIRFLOW_NEXT) ## Unit tests on the newest Airflow the index serves (AIRFLOW_NEXT, .venv-airflow-next)
	@$(STEP) begin unit-airflow-next
	@$(VENV_NEXT)/bin/pytest tests -m "not integration and not e2e" -q -p no:cacheprovider -n auto --dist worksteal --durations=25
	@$(STEP) end unit-airflow-next

# Integration tests in two passes. Most tests use only a namespace of their own and spend their time
# waiting for the cluster, so they run on IT_WORKERS xdist workers at once; those that train for real on
# the executing node (CPU) and those that hold the shared kwok nodes' GPUs or Kueue quota each form one
# xdist_group, run one at a time on one worker. The Kueue tests that need GPUs free run their jobs on kwok
# nodes of their own (tests/integration/conftest.py gpu_pool), beside the others. Tests marked `serial`
# restart the API server every test talks to: they run alone afterwards. Tests marked `airflow_next` need
# the newest Airflow (Task Loops, reschedules: 3.4): they run in newest-airflow-integration-test instead.
IT_WORKERS ?= 4
# The MultiKueue tests (tests/integration/test_multikueue*.py) need the worker cluster beside the local one:
# integration-test starts it (cluster-up is its prerequisite and takes the variable from here).
integration-test: export DEVCLUSTER_WORKER := 1
integration-test: venv cluster-up ## Integration tests against the local cluster (IT_WORKERS=4 in parallel, then the serial ones)
	@$(STEP) begin integration
	@$(VENV)/bin/pytest tests/integration -m "integration and not serial and not airflow_next" -q -p no:cacheprovider -rs --durations=25 \
		-n $(IT_WORKERS) --dist loadgroup
	@$(VENV)/bin/pytest tests/integration -m "integration and serial and not airflow_next" -q -p no:cacheprovider -rs --durations=25
	@$(STEP) end integration

# The integration tests that need the newest Airflow (AIRFLOW_NEXT), with .venv-airflow-next's Python, after
# the main integration pass (they share its cluster). Excluded there by marker, not skipped: a skip would
# hide a missing test.
newest-airflow-integration-test: $(VENV_NEXT)/.installed-$(AIRFLOW_NEXT) cluster-up ## Integration tests that need the newest Airflow (marker airflow_next, .venv-airflow-next)
	@$(STEP) begin integration-airflow-next
	@$(VENV_NEXT)/bin/pytest tests/integration -m "integration and airflow_next" -q -p no:cacheprovider -rs --durations=25
	@$(STEP) end integration-airflow-next

# The integration tests on the newest Airflow (dag.test in one process, mostly waiting for the cluster) run
# while the Airflow deployment of the e2e tests starts (its PostgreSQL, migrations and processes, ~30 s):
# neither restarts anything the other uses. Their output is grouped per target (-O).
test: lint unit-test lowest-deps-test newest-airflow-test integration-test ## Everything CI runs: lint, unit tests (also on the lowest declared versions and the newest Airflow), integration tests on the local cluster (those needing the newest Airflow in its venv), e2e tests in Airflow
	@DEVAIRFLOW_TRIGGERERS=2 $(MAKE) --no-print-directory -j2 -O newest-airflow-integration-test airflow-up
	@$(MAKE) --no-print-directory e2e-test

demo: venv cluster-up ## Run example 1 (retraining pipeline) end to end on the local cluster
	@$(VENV_PY) dev/demo/run_demo.py

bench: venv ## Import-cost benchmark (provider vs cncf SparkKubernetesOperator)
	@$(VENV_PY) bench/import_cost.py

.PHONY: bench-trigger-scale
bench-trigger-scale: N ?= 200
bench-trigger-scale: STEADY ?= 120
bench-trigger-scale: venv ## N deferred PyTorchJobs in one loop, provider vs cncf (N=200 STEADY=120 BENCH_ARGS=); needs make cluster-up
	@$(VENV_PY) bench/trigger_scale.py --jobs $(N) --steady $(STEADY) $(BENCH_ARGS)

clean: airflow-down cluster-down ## Stop Airflow and the cluster and remove local state (not the binary cache)
	@rm -rf $(DEVCLUSTER_DIR) .airflow .devairflow
