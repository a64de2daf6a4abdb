#!/usr/bin/env bash
# Gives the deployment its way into the local cluster, as the provider's users would set it up: a
# namespace ($DEVAIRFLOW_NAMESPACE) where the service account airflow-disttrain holds exactly the
# Role of deploy/rbac/role.yaml (and the ClusterRole of deploy/rbac/clusterrole.yaml, for the
# ClusterTrainingRuntimes a TrainJob names), the Kueue LocalQueue `user-queue` the TrainJob example
# queues in (admitted by the cluster's ClusterQueue `cluster-queue`), the example's `training-data` volume claim there, and
# .devairflow/kubeconfig authenticating as that service account (a fresh 48 h token on every run:
# the cluster's etcd is wiped when it restarts, so everything here is re-created idempotently).
# The `kubernetes_default` connection (written by up.sh) names this kubeconfig file.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

apiserver_ready || die "the local cluster is not up (run: make cluster-up)"
ns="$DEVAIRFLOW_NAMESPACE" sa="$DEVAIRFLOW_SERVICE_ACCOUNT"
{
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n---\n' "$ns"
  printf 'apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: %s\n  namespace: %s\n---\n' "$sa" "$ns"
  cat "$REPO_ROOT/deploy/rbac/role.yaml"
  printf '\n---\n'
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: $sa
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: airflow-disttrain}
subjects: [{kind: ServiceAccount, name: $sa, namespace: $ns}]
EOF
  printf '\n---\n'
  cat "$REPO_ROOT/deploy/rbac/clusterrole.yaml"
  printf '\n---\n'
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: airflow-disttrain-runtimes-$ns-$sa
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: airflow-disttrain-runtimes}
subjects: [{kind: ServiceAccount, name: $sa, namespace: $ns}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: user-queue
spec: {clusterQueue: cluster-queue}
EOF
} | kc -n "$ns" apply -f - >/dev/null || die "could not set up namespace $ns"
# The retraining example mounts the `training-data` claim (dev/demo/cluster_setup.py creates it).
"$VENV_BIN/python" -c '
import sys
sys.path.insert(0, sys.argv[1])
from cluster_setup import ensure_training_volume
from kubernetes import config
ensure_training_volume(config.new_client_from_config(config_file=sys.argv[2]), sys.argv[3])
' "$REPO_ROOT/dev/demo" "$KUBECONFIG_FILE" "$ns"
"$CLUSTER_SRC_DIR/sa-kubeconfig.sh" "$ns" "$sa" "$AF_KUBECONFIG" 48h >/dev/null
