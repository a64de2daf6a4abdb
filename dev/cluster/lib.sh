# Common settings for the dev/cluster/*.sh scripts. Sourced, not executed.
# shellcheck shell=bash

CLUSTER_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_SRC_DIR/../.." && pwd)"

# shellcheck source=versions.env
source "$CLUSTER_SRC_DIR/versions.env"

DISTTRAIN_CACHE="${DISTTRAIN_CACHE:-$HOME/.cache/airflow-provider-disttrain}"
BIN_CACHE="$DISTTRAIN_CACHE/bin"
DEVCLUSTER_DIR="${DEVCLUSTER_DIR:-$REPO_ROOT/.devcluster}"
mkdir -p "$DEVCLUSTER_DIR" 2>/dev/null || true
DEVCLUSTER_DIR="$(cd "$DEVCLUSTER_DIR" && pwd)"
# The cluster these scripts act on: "manager" (the default: the one cluster of every run) or "worker",
# a second, smaller cluster to which the manager's Kueue dispatches jobs through MultiKueue ("Two
# clusters" in dev/cluster/README.md). The worker lives in a directory of its own and on the manager's
# ports shifted by DEVCLUSTER_WORKER_PORT_OFFSET; the manager's directory stays reachable as MANAGER_DIR.
# The worker's settings are resolved once and exported (DEVCLUSTER_MANAGER_DIR marks it), so that the
# scripts a worker's script runs (pki.sh, down.sh) see the same directory and ports.
DEVCLUSTER_ROLE="${DEVCLUSTER_ROLE:-manager}"
_resolve_worker=0
if [ "$DEVCLUSTER_ROLE" = worker ] && [ -z "${DEVCLUSTER_MANAGER_DIR:-}" ]; then
  _resolve_worker=1
  export DEVCLUSTER_ROLE DEVCLUSTER_MANAGER_DIR="$DEVCLUSTER_DIR"
  DEVCLUSTER_DIR="${DEVCLUSTER_WORKER_DIR:-$DEVCLUSTER_MANAGER_DIR/worker}"
  mkdir -p "$DEVCLUSTER_DIR" 2>/dev/null || true
  export DEVCLUSTER_DIR="$(cd "$DEVCLUSTER_DIR" && pwd)"
elif [ "$DEVCLUSTER_ROLE" != manager ] && [ "$DEVCLUSTER_ROLE" != worker ]; then
  printf 'ERROR: DEVCLUSTER_ROLE must be manager or worker, not %s\n' "$DEVCLUSTER_ROLE" >&2; exit 1
fi
MANAGER_DIR="${DEVCLUSTER_MANAGER_DIR:-$DEVCLUSTER_DIR}"
PID_DIR="$DEVCLUSTER_DIR/pids"
LOG_DIR="$DEVCLUSTER_DIR/logs"
PKI_DIR="$DEVCLUSTER_DIR/pki"
KUBECONFIG_FILE="$DEVCLUSTER_DIR/kubeconfig"

# Loopback ports; each may be overridden from the environment.
DEVCLUSTER_APISERVER_PORT="${DEVCLUSTER_APISERVER_PORT:-6443}"
DEVCLUSTER_ETCD_PORT="${DEVCLUSTER_ETCD_PORT:-12379}"
DEVCLUSTER_ETCD_PEER_PORT="${DEVCLUSTER_ETCD_PEER_PORT:-12380}"
DEVCLUSTER_CONTROLLER_MANAGER_PORT="${DEVCLUSTER_CONTROLLER_MANAGER_PORT:-10257}"
DEVCLUSTER_SCHEDULER_PORT="${DEVCLUSTER_SCHEDULER_PORT:-10259}"
DEVCLUSTER_KUBELET_PORT="${DEVCLUSTER_KUBELET_PORT:-10250}"    # kwok's fake kubelet API (pod logs, healthz)
DEVCLUSTER_EXEC_KUBELET_PORT="${DEVCLUSTER_EXEC_KUBELET_PORT:-10251}"  # the executing node's runner (pod logs, healthz)
DEVCLUSTER_TRAINING_OPERATOR_METRICS_PORT="${DEVCLUSTER_TRAINING_OPERATOR_METRICS_PORT:-18080}"
DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT="${DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT:-18081}"
DEVCLUSTER_TRAINING_OPERATOR_WEBHOOK_PORT="${DEVCLUSTER_TRAINING_OPERATOR_WEBHOOK_PORT:-19443}"
DEVCLUSTER_JOBSET_HEALTH_PORT="${DEVCLUSTER_JOBSET_HEALTH_PORT:-18082}"
DEVCLUSTER_JOBSET_WEBHOOK_PORT="${DEVCLUSTER_JOBSET_WEBHOOK_PORT:-19444}"
DEVCLUSTER_TRAINER_HEALTH_PORT="${DEVCLUSTER_TRAINER_HEALTH_PORT:-18083}"
DEVCLUSTER_TRAINER_WEBHOOK_PORT="${DEVCLUSTER_TRAINER_WEBHOOK_PORT:-19445}"
# Trainer's status server (its TrainJobStatus gate: what trainers report becomes status.trainerStatus).
# Trainer v2.3 binds it on every address of the host (":<port>", not configurable), as training-operator
# does its webhook; the tests reach it on 127.0.0.1.
DEVCLUSTER_TRAINER_STATUS_PORT="${DEVCLUSTER_TRAINER_STATUS_PORT:-19447}"
# The loopback CONNECT proxy through which Trainer fetches the ServiceAccount issuer's OIDC discovery
# document (issuer_proxy.py): the issuer, https://$SA_ISSUER_HOST, is a name the host does not resolve.
DEVCLUSTER_ISSUER_PROXY_PORT="${DEVCLUSTER_ISSUER_PROXY_PORT:-18089}"
SA_ISSUER_HOST=kubernetes.default.svc.cluster.local
# Trainer reads its issuer from an in-cluster token at this fixed path (a token of its ServiceAccount,
# for an audience nothing accepts: only its "iss" is read).
TRAINER_ISSUER_TOKEN=/var/run/secrets/kubernetes.io/serviceaccount/token
DEVCLUSTER_KUEUE_HEALTH_PORT="${DEVCLUSTER_KUEUE_HEALTH_PORT:-18084}"
DEVCLUSTER_KUEUE_WEBHOOK_PORT="${DEVCLUSTER_KUEUE_WEBHOOK_PORT:-19446}"
# Kueue's visibility API server (pending Workloads and their queue positions), on loopback: reached
# directly, not through the API server (see controllers.sh).
DEVCLUSTER_KUEUE_VISIBILITY_PORT="${DEVCLUSTER_KUEUE_VISIBILITY_PORT:-18085}"
# mpi-operator's health server always listens on :8080 (not configurable: v0.8.2's
# cmd/mpi-operator/app/server.go has `healthCheckPort = 8080` and exits if it cannot bind it), which
# is why the worker's runs in a network namespace of its own (MPI_NETNS below).
MPI_OPERATOR_HEALTH_PORT=8080
if [ "$_resolve_worker" = 1 ]; then
  # Every DEVCLUSTER_*_PORT above (the manager's, default or overridden) plus the offset.
  export DEVCLUSTER_MANAGER_APISERVER_PORT="$DEVCLUSTER_APISERVER_PORT"
  for _port_var in $(compgen -v DEVCLUSTER_ | grep '_PORT$' | grep -v '^DEVCLUSTER_MANAGER_'); do
    printf -v "$_port_var" '%s' "$((${!_port_var} + ${DEVCLUSTER_WORKER_PORT_OFFSET:-100}))"
    export "${_port_var?}"
  done
  unset _port_var
fi
MANAGER_APISERVER_PORT="${DEVCLUSTER_MANAGER_APISERVER_PORT:-$DEVCLUSTER_APISERVER_PORT}"
# The name of the worker cluster on the manager (its MultiKueueCluster), the ClusterQueue, LocalQueue
# and AdmissionCheck that dispatch to it, and the namespaces given that LocalQueue on both clusters
# (a job's namespace and LocalQueue must exist on the worker too; MultiKueue creates neither).
MULTIKUEUE_CLUSTER="${DEVCLUSTER_WORKER_NAME:-disttrain-worker}"
MULTIKUEUE_QUEUE=multikueue
MULTIKUEUE_NAMESPACES=(multikueue)

# component name -> version
component_version() {
  case "$1" in
    etcd) echo "$ETCD_VERSION" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) echo "$KUBERNETES_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    training-operator) echo "$TRAINING_OPERATOR_VERSION" ;;
    mpi-operator) echo "$MPI_OPERATOR_VERSION" ;;
    jobset) echo "$JOBSET_VERSION" ;;
    trainer) echo "$TRAINER_VERSION" ;;
    kueue) echo "$KUEUE_VERSION" ;;
    node-runner|issuer-proxy|netns-relay) echo "local" ;;
    *) echo "unknown component $1" >&2; return 1 ;;
  esac
}

# The executing node's runner is Python (standard library only) run by the machine's interpreter.
NODE_RUNNER_PYTHON=/usr/bin/python3
component_bin() {
  if [ "$1" = node-runner ] || [ "$1" = issuer-proxy ] || [ "$1" = netns-relay ]; then echo "$NODE_RUNNER_PYTHON"; else echo "$BIN_CACHE/$1-$(component_version "$1")"; fi
}

ALL_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok training-operator mpi-operator jobset trainer kueue)

# Source dir of a Go module version in the module cache (downloads it if needed).
module_dir() { (cd / && GOFLAGS= go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'); }

# Closes every file descriptor above 2 of the calling subshell, so that a daemon started from it
# inherits none: `flock /tmp/disttrain-cluster.lock make cluster-up` would otherwise leave the lock's
# descriptor open in every cluster process, holding the lock for as long as the cluster runs.
close_inherited_fds() {
  local fd
  for fd in $(ls "/proc/$BASHPID/fd"); do
    if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*"; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# Processes started by up.sh, in start order (down.sh stops them in reverse).
PROCESSES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok node-runner training-operator mpi-operator jobset issuer-proxy trainer kueue)
# kwok's two nodes and the executing node (dev/cluster/noderunner)
NODE_COUNT=3
# The network namespace mpi-operator runs in: none (the host's) on the manager.
MPI_NETNS=
if [ "$DEVCLUSTER_ROLE" = worker ]; then
  # What MultiKueue dispatches PyTorchJobs and MPIJobs to: kwok's two nodes, training-operator,
  # mpi-operator, Kueue. No executing node (its bridge and pod range are the machine's, taken by the
  # manager), no JobSet or Trainer (a TrainJob is not dispatched here yet). mpi-operator runs in the
  # network namespace MPI_NETNS, where its fixed :8080 is free; netns-relay (netns_relay.py) gives it
  # the worker's API server on the namespace's 127.0.0.1.
  PROCESSES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok training-operator netns-relay mpi-operator kueue)
  NODE_COUNT=2
  MPI_NETNS="${DEVCLUSTER_MPI_NETNS:-disttrain-worker-mpi}"
fi
# in_mpi_netns COMMAND...: runs COMMAND in mpi-operator's network namespace (here, on the manager).
in_mpi_netns() {
  if [ -n "$MPI_NETNS" ]; then ip netns exec "$MPI_NETNS" "$@"; else "$@"; fi
}
# mpi-operator's health check, on its :8080 in its own namespace.
mpi_operator_healthy() { in_mpi_netns curl -sf --max-time 2 "http://127.0.0.1:$MPI_OPERATOR_HEALTH_PORT/healthz"; }
# has_process NAME: whether this cluster's role runs NAME
has_process() { [[ " ${PROCESSES[*]} " == *" $1 "* ]]; }
EXEC_NODE=disttrain-exec-0
# The executing node's pod range (a host bridge, dtbr0), and what must never leave the machine: the
# Service range (no kube-proxy: a ClusterIP leads nowhere), kwok's simulated pod addresses (kwok's
# default --cidr) and the rest of the executing node's /16.
EXEC_POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
UNREACHABLE_CIDRS=("$SERVICE_CIDR" 10.0.0.0/24 10.244.0.0/16)

kc() { "$(component_bin kubectl)" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
# kubectl on the manager cluster (the same as kc unless DEVCLUSTER_ROLE=worker)
kc_manager() { "$(component_bin kubectl)" --kubeconfig "$MANAGER_DIR/kubeconfig" --request-timeout 10s "$@"; }

# Prints the pid of a running process that up.sh started, or fails.
running_pid() {
  local name="$1" pidfile="$PID_DIR/$1.pid" pid argv0
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  argv0="$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1)"
  [ "$argv0" = "$(component_bin "$name")" ] || return 1
  echo "$pid"
}

# port_in_use PORT: true if something listens on PORT (any address, via ss),
# or accepts TCP connections on 127.0.0.1:PORT
port_in_use() {
  if command -v ss >/dev/null && [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; then return 0; fi
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The readiness endpoint of every controller up.sh starts after kwok (JobSet,
# Trainer and Kueue report ready only once their webhook server serves); mpi-operator's is checked
# by mpi_operator_healthy (in its namespace).
controller_ready_urls() {
  echo "http://127.0.0.1:$DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT/readyz"
  if has_process jobset; then echo "http://127.0.0.1:$DEVCLUSTER_JOBSET_HEALTH_PORT/readyz"; fi
  if has_process trainer; then echo "http://127.0.0.1:$DEVCLUSTER_TRAINER_HEALTH_PORT/readyz"; fi
  echo "http://127.0.0.1:$DEVCLUSTER_KUEUE_HEALTH_PORT/readyz"
}

# install_files DIR FILE...: copies each FILE into DIR unless an identical copy is there. The fixed
# paths (training-operator's and Kueue's cert dirs) are shared by both clusters: the worker's certs are
# the manager's (pki.sh), so it finds them in place and rewrites nothing a running manager watches.
install_files() {
  local dir="$1" f; shift
  mkdir -p "$dir" || return 1
  for f in "$@"; do cmp -s "$f" "$dir/$(basename "$f")" || cp "$f" "$dir/" || return 1; done
}

controllers_ready() {
  local u
  for u in $(controller_ready_urls); do curl -sf --max-time 2 "$u" >/dev/null || return 1; done
  if has_process mpi-operator; then mpi_operator_healthy >/dev/null || return 1; fi
}

apiserver_ready() {
  curl -sf --max-time 3 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT/readyz" >/dev/null 2>&1
}
