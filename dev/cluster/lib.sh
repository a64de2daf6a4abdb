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
# mpi-operator's health server always listens on :8080 (not configurable).
MPI_OPERATOR_HEALTH_PORT=8080

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
    node-runner|issuer-proxy) echo "local" ;;
    *) echo "unknown component $1" >&2; return 1 ;;
  esac
}

# The executing node's runner is Python (standard library only) run by the machine's interpreter.
NODE_RUNNER_PYTHON=/usr/bin/python3
component_bin() {
  if [ "$1" = node-runner ] || [ "$1" = issuer-proxy ]; then echo "$NODE_RUNNER_PYTHON"; else echo "$BIN_CACHE/$1-$(component_version "$1")"; fi
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
EXEC_NODE=disttrain-exec-0
# The executing node's pod range (a host bridge, dtbr0), and what must never leave the machine: the
# Service range (no kube-proxy: a ClusterIP leads nowhere), kwok's simulated pod addresses (kwok's
# default --cidr) and the rest of the executing node's /16.
EXEC_POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
UNREACHABLE_CIDRS=("$SERVICE_CIDR" 10.0.0.0/24 10.244.0.0/16)

kc() { "$(component_bin kubectl)" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

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
# Trainer and Kueue report ready only once their webhook server serves).
controller_ready_urls() {
  echo "http://127.0.0.1:$DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT/readyz"
  echo "http://127.0.0.1:$MPI_OPERATOR_HEALTH_PORT/healthz"
  echo "http://127.0.0.1:$DEVCLUSTER_JOBSET_HEALTH_PORT/readyz"
  echo "http://127.0.0.1:$DEVCLUSTER_TRAINER_HEALTH_PORT/readyz"
  echo "http://127.0.0.1:$DEVCLUSTER_KUEUE_HEALTH_PORT/readyz"
}

controllers_ready() {
  local u
  for u in $(controller_ready_urls); do curl -sf --max-time 2 "$u" >/dev/null || return 1; done
}

apiserver_ready() {
  curl -sf --max-time 3 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT/readyz" >/dev/null 2>&1
}
