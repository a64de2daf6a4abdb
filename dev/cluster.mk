# Local test cluster targets (see dev/cluster/README.md). Included from Makefile.
# State lives in $(DEVCLUSTER_DIR) (default: .devcluster/ at the repository root);
# binaries are cached in $${DISTTRAIN_CACHE:-~/.cache/airflow-provider-disttrain}/bin.
DISTTRAIN_CLUSTER_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))/cluster

.PHONY: cluster-build cluster-up cluster-down cluster-status cluster-smoke

cluster-build: ## Build the cluster's binaries that are not cached yet
	@bash $(DISTTRAIN_CLUSTER_DIR)/build.sh

cluster-up: ## Start the local test cluster (builds if needed); idempotent
	@$(STEP) begin cluster
	@bash $(DISTTRAIN_CLUSTER_DIR)/up.sh
	@$(STEP) end cluster

cluster-down: ## Stop the processes started by cluster-up
	@bash $(DISTTRAIN_CLUSTER_DIR)/down.sh

cluster-status: ## Show which cluster components run, and the nodes
	@bash $(DISTTRAIN_CLUSTER_DIR)/status.sh || true

cluster-smoke: ## Run PyTorchJob/MPIJob/failure/GPU checks against the cluster
	@bash $(DISTTRAIN_CLUSTER_DIR)/smoke.sh
