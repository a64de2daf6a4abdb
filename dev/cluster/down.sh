#!/usr/bin/env bash
# Stops exactly the processes that dev/cluster/up.sh started (pid files in
# $DEVCLUSTER_DIR/pids/) and waits until they have exited: first the
# controllers, operators and kwok (together), then kube-apiserver, then etcd.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stopped=0
if [ "$DEVCLUSTER_ROLE" = worker ]; then
  # The manager's MultiKueueCluster goes first: its Kueue stops dispatching here (the ClusterQueue turns
  # inactive and holds new jobs) and, given a new one by the next cluster-up, connects at once instead
  # of after the backoff of its failed reconnections (up to minutes).
  kc_manager delete multikueuecluster "$MULTIKUEUE_CLUSTER" --ignore-not-found --wait=false >/dev/null 2>&1 || true
fi
# stop_group NAME... : SIGTERM to each, wait up to 15 s, then SIGKILL
stop_group() {
  local name pid pids=() names=()
  for name in "$@"; do
    if pid="$(running_pid "$name")"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); names+=("$name")
    fi
  done
  local i deadline=$((SECONDS + 15))
  for i in "${!pids[@]}"; do
    pid="${pids[$i]}"
    while [ -d "/proc/$pid" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if [ -d "/proc/$pid" ]; then
      log "${names[$i]} (pid $pid) did not exit after SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while [ -d "/proc/$pid" ]; do sleep 0.1; done
    fi
    log "stopped ${names[$i]} (pid $pid)"
    stopped=$((stopped + 1))
  done
  for name in "$@"; do rm -f "$PID_DIR/$name.pid"; done
}

# Supervisors first, so that nothing restarts what is being stopped.
for supervisor in "$PID_DIR"/*.supervisor.pid; do
  [ -f "$supervisor" ] || continue
  pid="$(cat "$supervisor")"
  if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  fi
  rm -f "$supervisor"
done
stop_group kueue trainer issuer-proxy jobset mpi-operator netns-relay training-operator node-runner kwok kube-scheduler kube-controller-manager
stop_group kube-apiserver
stop_group etcd
if [ -n "$MPI_NETNS" ]; then ip netns delete "$MPI_NETNS" 2>/dev/null || true; fi
if [ "$DEVCLUSTER_ROLE" = worker ]; then
  # The token, the bridge and the routes below are the manager's, which may still run.
  log "worker down ($stopped process(es) stopped)"
  exit 0
fi
rm -f "$TRAINER_ISSUER_TOKEN"
# The executing node's network: its pods' namespaces (gone with the runner, unless it was killed),
# the bridge, and the unreachable routes.
for ns in $(ip netns list 2>/dev/null | awk '/^dtpod-/ {print $1}'); do ip netns delete "$ns" 2>/dev/null || true; done
ip link delete dtbr0 2>/dev/null || true
for cidr in "${UNREACHABLE_CIDRS[@]}"; do ip route delete unreachable "$cidr" 2>/dev/null || true; done
log "cluster down ($stopped process(es) stopped)"
