#!/usr/bin/env bash
# Shows which components of the local test cluster run, and its nodes.
# Exit code 0 if every component runs, 1 otherwise.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

up=0
for name in "${PROCESSES[@]}"; do
  if pid="$(running_pid "$name")"; then
    printf '  %-24s running  pid %-8s %s\n' "$name" "$pid" "$(component_version "$name")"
    up=$((up + 1))
  else
    printf '  %-24s stopped\n' "$name"
  fi
done
if [ "$up" -gt 0 ] && apiserver_ready; then
  echo "kube-apiserver: https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT ready; KUBECONFIG=$KUBECONFIG_FILE"
  kc get nodes -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].status,CPU:.status.allocatable.cpu,MEMORY:.status.allocatable.memory,GPU:.status.allocatable.nvidia\.com/gpu,PODS:.status.allocatable.pods' || true
fi
[ "$up" -eq "${#PROCESSES[@]}" ]
