# Local test cluster targets (see dev/cluster/README.md). Included from Makefile.
# State lives in $(DEVCLUSTER_DIR) (default: .devcluster/ at the repository root);
# binaries are cached in $${DISTTRAIN_CACHE:-~/.cache/airflow-provider-disttrain}/bin.
DISTTRAIN_CLUSTER_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))/cluster

.PHONY: cluster-build cluster-up cluster-down cluster-status cluster-smoke cluster-up-multikueue cluster-smoke-multikueue

# DEVCLUSTER_WORKER=1: cluster-up also starts the worker cluster and configures MultiKueue on the
# manager to dispatch to it ("Two clusters" in dev/cluster/README.md). Its directory:
DEVCLUSTER_WORKER_DIR ?= $(DEVCLUSTER_DIR)/worker
export DEVCLUSTER_WORKER_DIR

cluster-build: ## Build the cluster's binaries that are not cached yet
	@bash $(DISTTRAIN_CLUSTER_DIR)/build.sh

cluster-up: ## Start the local test cluster (builds if needed); idempotent
	@$(STEP) begin cluster
	@bash $(DISTTRAIN_CLUSTER_DIR)/up.sh
	@if [ "$(DEVCLUSTER_WORKER)" = 1 ]; then DEVCLUSTER_ROLE=worker bash $(DISTTRAIN_CLUSTER_DIR)/up.sh; fi
	@$(STEP) end cluster

cluster-up-multikueue: ## Start the cluster and a worker cluster it dispatches to with MultiKueue
	@$(MAKE) --no-print-directory cluster-up DEVCLUSTER_WORKER=1

cluster-down: ## Stop the processes started by cluster-up (the worker cluster's too)
	@if [ -d "$(DEVCLUSTER_WORKER_DIR)/pids" ]; then DEVCLUSTER_ROLE=worker bash $(DISTTRAIN_CLUSTER_DIR)/down.sh; fi
	@bash $(DISTTRAIN_CLUSTER_DIR)/down.sh

cluster-status: ## Show which cluster components run, and the nodes
	@bash $(DISTTRAIN_CLUSTER_DIR)/status.sh || true
	@if [ -d "$(DEVCLUSTER_WORKER_DIR)/pids" ]; then echo "worker cluster ($(DEVCLUSTER_WORKER_DIR)):"; DEVCLUSTER_ROLE=worker bash $(DISTTRAIN_CLUSTER_DIR)/status.sh || true; fi

cluster-smoke: ## Run PyTorchJob/MPIJob/failure/GPU checks against the cluster
	@bash $(DISTTRAIN_CLUSTER_DIR)/smoke.sh

cluster-smoke-multikueue: ## A PyTorchJob dispatched by MultiKueue to the worker cluster (cluster-up-multikueue first)
	@bash $(DISTTRAIN_CLUSTER_DIR)/smoke-multikueue.sh
