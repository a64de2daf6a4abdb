# Local Airflow deployment targets (see dev/airflow/ and docs/guides/ui.md).
# Included from Makefile. State lives in .devairflow/ (git-ignored): PostgreSQL's data, AIRFLOW_HOME,
# logs, the DAGs folder and .devairflow/env (AIRFLOW_API_URL, AIRFLOW_API_TOKEN).
DISTTRAIN_AIRFLOW_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))/airflow

.PHONY: airflow-up airflow-down airflow-status e2e-test

airflow-up: venv cluster-up ## Start Airflow (PostgreSQL, api-server, scheduler, dag-processor, triggerer; DEVAIRFLOW_TRIGGERERS=2 for two) on the local cluster; idempotent
	@$(STEP) begin airflow
	@bash $(DISTTRAIN_AIRFLOW_DIR)/up.sh
	@$(STEP) end airflow

airflow-down: ## Stop the processes started by airflow-up (keeps .devairflow/)
	@bash $(DISTTRAIN_AIRFLOW_DIR)/down.sh

airflow-status: ## Show the Airflow processes, their memory and the API server's health
	@bash $(DISTTRAIN_AIRFLOW_DIR)/status.sh || true

# The e2e tests need two triggerers (high availability: one is killed, the other takes over its triggers);
# a target-specific variable reaches the airflow-up prerequisite too.
e2e-test: export DEVAIRFLOW_TRIGGERERS := 2
e2e-test: venv cluster-up airflow-up ## End-to-end tests through Airflow's REST API (scheduler, two triggerers, faults)
	@$(STEP) begin e2e
	@$(VENV)/bin/pytest tests/e2e -m e2e -q -p no:cacheprovider -rs --durations=25
	@$(STEP) end e2e
