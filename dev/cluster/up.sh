#!/usr/bin/env bash
# Starts the local test cluster (see dev/cluster/README.md): builds missing
# binaries, then runs etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok, training-operator, mpi-operator, the JobSet controller,
# the Kubeflow Trainer controller manager and Kueue as local processes on
# 127.0.0.1, registers their webhooks, and waits until nodes are Ready and every
# controller serves; then applies Trainer's ClusterTrainingRuntimes and Kueue's
# ResourceFlavor/ClusterQueue/LocalQueue (see dev/cluster/README.md).
# Idempotent: if the cluster is already up and healthy it says so and exits 0.
# State: $DEVCLUSTER_DIR (default <repo>/.devcluster): kubeconfig, pids/, logs/, pki/.
# etcd data is wiped on every fresh start (DEVCLUSTER_KEEP_DATA=1 keeps it).
# DEVCLUSTER_ROLE=worker starts the second cluster of "Two clusters" in dev/cluster/README.md instead
# (fewer processes, see lib.sh) and configures MultiKueue on the running manager to dispatch to it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=$SECONDS
STARTUP_TIMEOUT="${DEVCLUSTER_STARTUP_TIMEOUT:-90}"

# ---------------------------------------------------------------- already up?
alive=()
for p in "${PROCESSES[@]}"; do
  if running_pid "$p" >/dev/null; then alive+=("$p"); fi
done
if [ ${#alive[@]} -eq ${#PROCESSES[@]} ] && apiserver_ready \
   && [ "$(kc get nodes --no-headers 2>/dev/null | grep -c ' Ready ')" -ge "$NODE_COUNT" ] \
   && controllers_ready; then
  log "cluster already up and healthy (KUBECONFIG=$KUBECONFIG_FILE)"
  if [ "$DEVCLUSTER_ROLE" = worker ]; then
    # The manager may have started afresh since: give it its MultiKueue objects again.
    kc_manager apply -f "$DEVCLUSTER_DIR/multikueue-manager.yaml" >/dev/null || die "configuring MultiKueue on the manager failed"
  fi
  exit 0
fi
if [ ${#alive[@]} -gt 0 ]; then
  log "cluster partly running (${alive[*]}); stopping it first"
  "$CLUSTER_SRC_DIR/down.sh"
fi

# --------------------------------------------------------------------- build
missing=()
for c in "${ALL_COMPONENTS[@]}"; do [ -x "$(component_bin "$c")" ] || missing+=("$c"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "building missing binaries: ${missing[*]}"
  "$CLUSTER_SRC_DIR/build.sh" "${missing[@]}"
  T0=$SECONDS
fi

# --------------------------------------------------------------------- ports
busy=()
ports=("$DEVCLUSTER_ETCD_PORT" "$DEVCLUSTER_ETCD_PEER_PORT" "$DEVCLUSTER_APISERVER_PORT"
       "$DEVCLUSTER_CONTROLLER_MANAGER_PORT" "$DEVCLUSTER_SCHEDULER_PORT" "$DEVCLUSTER_KUBELET_PORT"
       "$DEVCLUSTER_TRAINING_OPERATOR_METRICS_PORT" "$DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT"
       "$DEVCLUSTER_TRAINING_OPERATOR_WEBHOOK_PORT" "$DEVCLUSTER_KUEUE_HEALTH_PORT" "$DEVCLUSTER_KUEUE_WEBHOOK_PORT")
if [ "$DEVCLUSTER_ROLE" = worker ]; then
  ports+=("$DEVCLUSTER_KUEUE_VISIBILITY_PORT")
  kc_manager get --raw /readyz >/dev/null 2>&1 \
    || die "the manager cluster ($MANAGER_DIR, port $MANAGER_APISERVER_PORT) is not up: start it first (make cluster-up)"
else
  ports+=("$DEVCLUSTER_EXEC_KUBELET_PORT" "$MPI_OPERATOR_HEALTH_PORT"
          "$DEVCLUSTER_JOBSET_HEALTH_PORT" "$DEVCLUSTER_JOBSET_WEBHOOK_PORT"
          "$DEVCLUSTER_TRAINER_HEALTH_PORT" "$DEVCLUSTER_TRAINER_WEBHOOK_PORT"
          "$DEVCLUSTER_TRAINER_STATUS_PORT" "$DEVCLUSTER_ISSUER_PROXY_PORT")
fi
for port in "${ports[@]}"; do
  if port_in_use "$port"; then busy+=("$port"); fi
done
if [ ${#busy[@]} -gt 0 ]; then
  die "port(s) already in use: ${busy[*]} (override with DEVCLUSTER_*_PORT, see dev/cluster/lib.sh; mpi-operator's 8080 is fixed)"
fi

mkdir -p "$PID_DIR" "$LOG_DIR"
"$CLUSTER_SRC_DIR/pki.sh"

# ----------------------------------------------------------------- helpers
fail_component() {
  local name="$1" msg="$2"
  echo "ERROR: $msg" >&2
  echo "---- last 40 lines of $LOG_DIR/$name.log ----" >&2
  tail -n 40 "$LOG_DIR/$name.log" >&2 || true
  echo "---- (cluster left as is; run 'make cluster-down' to stop it) ----" >&2
  exit 1
}

# start NAME ARGS... : runs the component's binary in its own session
start() {
  local name="$1"; shift
  local bin; bin="$(component_bin "$name")"
  : >"$LOG_DIR/$name.log"
  (close_inherited_fds; exec setsid "$bin" "$@") </dev/null >>"$LOG_DIR/$name.log" 2>&1 &
  echo $! >"$PID_DIR/$name.pid"
  # $! is setsid until it has exec'd the binary: on a loaded machine running_pid would read argv0
  # "setsid" and take the component for dead. Wait (at most 5 s) until the exec has happened.
  local i
  for i in $(seq 50); do running_pid "$name" >/dev/null && break; sleep 0.1; done
}

# supervise NAME ARGS... : like start, but restarts the process whenever it exits, as a Deployment
# would. mpi-operator needs it: its leader election is always on and it exits (by design) when it
# cannot renew its lease, e.g. while the API server restarts. The pid file always names the running
# binary; the supervising shell's pid goes to NAME.supervisor.pid (down.sh stops it first).
# With NETNS set, the supervisor and the process run in that network namespace (ip netns exec).
supervise() {
  local name="$1"; shift
  local bin; bin="$(component_bin "$name")"
  local netns=()
  if [ -n "${NETNS:-}" ]; then netns=(ip netns exec "$NETNS"); fi
  : >"$LOG_DIR/$name.log"
  (close_inherited_fds; PIDFILE="$PID_DIR/$name.pid" exec "${netns[@]}" setsid bash -c '
    trap "kill \$child 2>/dev/null; exit 0" TERM
    while :; do
      "$@" & child=$!
      echo "$child" >"$PIDFILE"
      wait "$child" || true
      echo "[devcluster supervisor] $1 exited; restarting in 1 s"
      sleep 1
    done' supervisor "$bin" "$@") </dev/null >>"$LOG_DIR/$name.log" 2>&1 &
  echo $! >"$PID_DIR/$name.supervisor.pid"
  for _ in $(seq 1 50); do [ -s "$PID_DIR/$name.pid" ] && break; sleep 0.1; done
}

# wait_for NAME DESCRIPTION COMMAND... : polls COMMAND until it succeeds;
# fails if process NAME exits or the startup timeout passes.
wait_for() {
  local name="$1" desc="$2"; shift 2
  while ! "$@" >/dev/null 2>&1; do
    running_pid "$name" >/dev/null || fail_component "$name" "$name exited while waiting for: $desc"
    [ $((SECONDS - T0)) -lt "$STARTUP_TIMEOUT" ] || fail_component "$name" "timed out waiting for: $desc"
    sleep 0.3
  done
}

log_has() { grep -q "$2" "$LOG_DIR/$1.log"; }
http_ok() { curl -sf --max-time 2 "$1" >/dev/null; }
https_ok() { curl -skf --max-time 2 "$1" >/dev/null; }
node_runner_ok() {
  curl -sf --max-time 2 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "https://127.0.0.1:$DEVCLUSTER_EXEC_KUBELET_PORT/healthz" >/dev/null
}

# The node runner's configuration (dev/cluster/noderunner/__main__.py reads it).
render_node_runner_config() {
  local unreachable
  unreachable="$(printf '"%s",' "${UNREACHABLE_CIDRS[@]}")"
  cat <<EOF
{
  "node_name": "$EXEC_NODE",
  "apiserver_port": $DEVCLUSTER_APISERVER_PORT,
  "kubelet_port": $DEVCLUSTER_EXEC_KUBELET_PORT,
  "ca": "$PKI_DIR/ca.crt",
  "client_cert": "$PKI_DIR/node-runner.crt",
  "client_key": "$PKI_DIR/node-runner.key",
  "serving_cert": "$PKI_DIR/node-runner-kubelet.crt",
  "serving_key": "$PKI_DIR/node-runner-kubelet.key",
  "pod_cidr": "$EXEC_POD_CIDR",
  "unreachable": [${unreachable%,}],
  "state_dir": "$DEVCLUSTER_DIR/node",
  "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
  "image_env": {"PATH": "$IMAGE_DIR/bin:$IMAGE_VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
  "image_mounts": [
    {"source": "$IMAGE_DIR/workspace", "target": "/workspace", "read_only": true},
    {"source": "$IMAGE_DIR/ssh_config", "target": "/etc/ssh/ssh_config.d/disttrain-image.conf", "read_only": true}
  ],
  "backoff_seconds": 1,
  "max_backoff_seconds": 10
}
EOF
}

# ----------------------------------------------------------------------- etcd
if [ "${DEVCLUSTER_KEEP_DATA:-0}" != 1 ]; then rm -rf "$DEVCLUSTER_DIR/etcd"; fi
log "starting etcd $ETCD_VERSION on 127.0.0.1:$DEVCLUSTER_ETCD_PORT"
start etcd \
  --name devcluster --data-dir "$DEVCLUSTER_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$DEVCLUSTER_ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$DEVCLUSTER_ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$DEVCLUSTER_ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$DEVCLUSTER_ETCD_PEER_PORT" \
  --initial-cluster "devcluster=http://127.0.0.1:$DEVCLUSTER_ETCD_PEER_PORT" \
  --unsafe-no-fsync --quota-backend-bytes 2147483648 --log-level warn
wait_for etcd "etcd /health" http_ok "http://127.0.0.1:$DEVCLUSTER_ETCD_PORT/health"

# ------------------------------------------------------------- kube-apiserver
log "starting kube-apiserver $KUBERNETES_VERSION on https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT"
start kube-apiserver \
  --etcd-servers "http://127.0.0.1:$DEVCLUSTER_ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$DEVCLUSTER_APISERVER_PORT" \
  --tls-cert-file "$PKI_DIR/apiserver.crt" --tls-private-key-file "$PKI_DIR/apiserver.key" \
  --client-ca-file "$PKI_DIR/ca.crt" \
  --authorization-mode Node,RBAC \
  --service-account-key-file "$PKI_DIR/sa.pub" \
  --service-account-signing-key-file "$PKI_DIR/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --enable-admission-plugins PodNodeSelector,PodTolerationRestriction \
  --endpoint-reconciler-type none \
  --kubelet-client-certificate "$PKI_DIR/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI_DIR/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --requestheader-client-ca-file "$PKI_DIR/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User \
  --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI_DIR/front-proxy-client.crt" \
  --proxy-client-key-file "$PKI_DIR/front-proxy-client.key" \
  --allow-privileged=true \
  --profiling=false \
  --v=1
wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready

# ------------------------------------------------ controller-manager, scheduler
log "starting kube-controller-manager and kube-scheduler"
start kube-controller-manager \
  --kubeconfig "$PKI_DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$PKI_DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$PKI_DIR/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$DEVCLUSTER_CONTROLLER_MANAGER_PORT" \
  --service-account-private-key-file "$PKI_DIR/sa.key" \
  --root-ca-file "$PKI_DIR/ca.crt" \
  --cluster-signing-cert-file "$PKI_DIR/ca.crt" --cluster-signing-key-file "$PKI_DIR/ca.key" \
  --use-service-account-credentials=true \
  --leader-elect=false \
  --controllers '*' \
  --profiling=false \
  --v=1
start kube-scheduler \
  --kubeconfig "$PKI_DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$PKI_DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$PKI_DIR/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$DEVCLUSTER_SCHEDULER_PORT" \
  --leader-elect=false \
  --profiling=false \
  --v=1

# ----------------------------------------------------------------------- kwok
KWOK_CONF="$DEVCLUSTER_DIR/kwok.yaml"
{
  for f in node-initialize node-heartbeat pod-ready pod-complete pod-delete; do
    cat "$CLUSTER_SRC_DIR/kwok/$f.yaml"; echo "---"
  done
  cat <<EOF
# Every container of every pod "prints" the same lines (kwok serves logs from files).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: disttrain-pod-logs
spec:
  logs:
  - logsFile: $CLUSTER_SRC_DIR/kwok/pod.log
    previousLogsFile: $CLUSTER_SRC_DIR/kwok/pod.log
EOF
} >"$KWOK_CONF"
log "starting kwok $KWOK_VERSION (fake kubelet on 127.0.0.1:$DEVCLUSTER_KUBELET_PORT)"
start kwok \
  --kubeconfig "$PKI_DIR/kwok.kubeconfig" \
  --config "$KWOK_CONF" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-ip 127.0.0.1 --node-port "$DEVCLUSTER_KUBELET_PORT" \
  --node-lease-duration-seconds 40 \
  --server-address "127.0.0.1:$DEVCLUSTER_KUBELET_PORT" \
  --tls-cert-file "$PKI_DIR/kwok-kubelet.crt" --tls-private-key-file "$PKI_DIR/kwok-kubelet.key"

# ------------------------------------------------------------ executing node
# Pods bound to $EXEC_NODE run for real (see "The executing node" in dev/cluster/README.md).
if has_process node-runner; then
  "$CLUSTER_SRC_DIR/node-image.sh"
  # shellcheck source=/dev/null
  source "$DEVCLUSTER_DIR/node-image.env"
  log "starting the executing node $EXEC_NODE (kubelet endpoint 127.0.0.1:$DEVCLUSTER_EXEC_KUBELET_PORT, pods $EXEC_POD_CIDR)"
  render_node_runner_config >"$DEVCLUSTER_DIR/node-runner.json"
  PYTHONPATH="$CLUSTER_SRC_DIR" start node-runner -m noderunner --config "$DEVCLUSTER_DIR/node-runner.json"
fi

# -------------------------------------------- namespaces, CRDs, secret, nodes
TO_DIR="$(module_dir github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION")"
MPI_DIR="$(module_dir github.com/kubeflow/mpi-operator "$MPI_OPERATOR_VERSION")"
[ -d "$TO_DIR/manifests/base/crds" ] || die "training-operator CRDs not found (module dir: '$TO_DIR')"
[ -f "$MPI_DIR/manifests/base/kubeflow.org_mpijobs.yaml" ] || die "mpi-operator CRD not found (module dir: '$MPI_DIR')"
crd_args=()
for f in "$TO_DIR"/manifests/base/crds/kubeflow.org_*.yaml; do
  # training-operator's MPIJob v1 CRD has the same name as mpi-operator's v2beta1 one.
  [ "$(basename "$f")" = kubeflow.org_mpijobs.yaml ] || crd_args+=(-f "$f")
done
crd_args+=(-f "$MPI_DIR/manifests/base/kubeflow.org_mpijobs.yaml")
# shellcheck source=controllers.sh
source "$CLUSTER_SRC_DIR/controllers.sh"
for d in "$JOBSET_DIR/config/components/crd/bases" "$TRAINER_DIR/manifests/base/crds" "$KUEUE_DIR/config/components/crd/bases"; do
  [ -d "$d" ] || die "CRDs not found: '$d'"
  for f in "$d"/*.yaml; do [ "$(basename "$f")" = kustomization.yaml ] || crd_args+=(-f "$f"); done
done
log "applying CRDs, namespaces, nodes"
kc apply --server-side --force-conflicts "${crd_args[@]}" >"$LOG_DIR/apply.log" 2>&1 \
  || { cat "$LOG_DIR/apply.log" >&2; die "applying CRDs failed"; }
W="$PKI_DIR/training-operator-webhook"
{
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubeflow\n---\n'
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: mpi-operator\n---\n'
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kueue-system\n---\n'
  # Secret of training-operator's cert rotator, pre-filled with a valid cert.
  printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: training-operator-webhook-cert\n  namespace: kubeflow\ndata:\n'
  for k in ca.crt ca.key tls.crt tls.key; do printf '  %s: %s\n' "$k" "$(base64 -w0 <"$W/$k")"; done
  echo '---'
  # Trainer's status server serves the cert of /tmp/k8s-webhook-server/serving-certs (a fixed path:
  # training-operator's, below); its CA goes from this Secret into each TrainJob's <name>-tls-config
  # ConfigMap (KUBEFLOW_TRAINER_SERVER_CA_CERT). The ServiceAccount's token tells Trainer the issuer.
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubeflow-system\n---\n'
  printf 'apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kubeflow-trainer-controller-manager\n  namespace: kubeflow-system\n---\n'
  printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: kubeflow-trainer-webhook-cert\n  namespace: kubeflow-system\ndata:\n'
  printf '  ca.crt: %s\n' "$(base64 -w0 <"$W/ca.crt")"
  echo '---'
  cat "$CLUSTER_SRC_DIR/kwok/nodes.yaml"
} | kc apply -f - >>"$LOG_DIR/apply.log" 2>&1 || { cat "$LOG_DIR/apply.log" >&2; die "applying namespaces/secret/nodes failed"; }
# The rotator waits for the certificate at this fixed path (not configurable).
TO_CERT_DIR=/tmp/k8s-webhook-server/serving-certs
install_files "$TO_CERT_DIR" "$W/ca.crt" "$W/tls.crt" "$W/tls.key"
kc wait --for condition=established --timeout=60s crd --all >>"$LOG_DIR/apply.log"

# ------------------------------------------------------------------ operators
log "starting training-operator $TRAINING_OPERATOR_VERSION$(has_process mpi-operator && echo " and mpi-operator $MPI_OPERATOR_VERSION")"
MY_POD_NAMESPACE=kubeflow KUBECONFIG="$PKI_DIR/training-operator.kubeconfig" start training-operator \
  --kubeconfig "$PKI_DIR/training-operator.kubeconfig" \
  --metrics-bind-address "127.0.0.1:$DEVCLUSTER_TRAINING_OPERATOR_METRICS_PORT" \
  --health-probe-bind-address "127.0.0.1:$DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT" \
  --webhook-server-port "$DEVCLUSTER_TRAINING_OPERATOR_WEBHOOK_PORT" \
  --enable-scheme pytorchjob --enable-scheme tfjob --enable-scheme xgboostjob \
  --enable-scheme paddlejob --enable-scheme jaxjob \
  --pytorch-init-container-template-file "$CLUSTER_SRC_DIR/pytorch-init-container.yaml" \
  --leader-elect=false
if has_process netns-relay; then
  # mpi-operator's own network namespace (MPI_NETNS in lib.sh): loopback only, with the worker's API
  # server relayed onto its 127.0.0.1 (a namespace left by a killed run is replaced).
  ip netns delete "$MPI_NETNS" 2>/dev/null || true
  ip netns add "$MPI_NETNS" && ip -n "$MPI_NETNS" link set lo up || die "cannot create network namespace $MPI_NETNS"
  start netns-relay "$CLUSTER_SRC_DIR/netns_relay.py" "/run/netns/$MPI_NETNS" "$DEVCLUSTER_APISERVER_PORT"
  relayed_apiserver_ready() {
    in_mpi_netns curl -sf --max-time 3 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
      "https://127.0.0.1:$DEVCLUSTER_APISERVER_PORT/readyz"
  }
  wait_for netns-relay "the API server relayed into network namespace $MPI_NETNS" relayed_apiserver_ready
fi
if has_process mpi-operator; then
  NETNS="$MPI_NETNS" KUBECONFIG="$PKI_DIR/mpi-operator.kubeconfig" supervise mpi-operator \
    --kubeConfig "$PKI_DIR/mpi-operator.kubeconfig" \
    --lock-namespace mpi-operator \
    --monitoring-port 0 \
    --threadiness 2
fi

# ------------------------------------------------ JobSet, Trainer, Kueue
# Their internal cert management is off (it would issue certs for in-cluster
# Service names); they serve pki.sh's webhook-serving cert (SAN 127.0.0.1) from
# a cert dir, and their webhooks are registered by URL with pki.sh's CA.
mkdir -p "$WEBHOOK_CERT_DIR"
cp "$PKI_DIR/webhook-serving.crt" "$WEBHOOK_CERT_DIR/tls.crt"
cp "$PKI_DIR/webhook-serving.key" "$WEBHOOK_CERT_DIR/tls.key"
# Trainer's webhook cert dir is not configurable: controller-runtime's default,
# $TMPDIR/k8s-webhook-server/serving-certs (a private TMPDIR, so it does not
# share training-operator's /tmp one).
TRAINER_TMPDIR="$DEVCLUSTER_DIR/trainer-tmp"
if has_process trainer; then
  mkdir -p "$TRAINER_TMPDIR/k8s-webhook-server/serving-certs"
  cp "$WEBHOOK_CERT_DIR/tls.crt" "$WEBHOOK_CERT_DIR/tls.key" "$TRAINER_TMPDIR/k8s-webhook-server/serving-certs/"
fi
# Kueue without internal cert management reads its metrics cert from this fixed
# path at startup (even with metrics off) and exits if it is missing.
KUEUE_METRICS_CERT_DIR=/etc/kueue/metrics/certs
install_files "$KUEUE_METRICS_CERT_DIR" "$WEBHOOK_CERT_DIR/tls.crt" "$WEBHOOK_CERT_DIR/tls.key" 2>/dev/null \
  || die "cannot write $KUEUE_METRICS_CERT_DIR (Kueue reads its metrics cert there; run as a user who may create it)"
# ...and its visibility server's from this one (the loopback cert of the webhooks: 127.0.0.1, localhost).
KUEUE_VISIBILITY_CERT_DIR=/visibility
install_files "$KUEUE_VISIBILITY_CERT_DIR" "$WEBHOOK_CERT_DIR/tls.crt" "$WEBHOOK_CERT_DIR/tls.key" 2>/dev/null \
  || die "cannot write $KUEUE_VISIBILITY_CERT_DIR (Kueue's visibility server reads its cert there)"
render_controller_configs
if has_process trainer; then
  log "starting JobSet $JOBSET_VERSION, Kubeflow Trainer $TRAINER_VERSION and Kueue $KUEUE_VERSION"
  KUBECONFIG="$PKI_DIR/jobset.kubeconfig" start jobset --kubeconfig "$PKI_DIR/jobset.kubeconfig" --config "$DEVCLUSTER_DIR/jobset-config.yaml"
  # Trainer's status server (controllers.sh) reads the issuer from an in-cluster token and fetches its
  # discovery document through the issuer proxy (HTTPS_PROXY: Go proxies no request to 127.0.0.1).
  mkdir -p "$(dirname "$TRAINER_ISSUER_TOKEN")"
  kc -n kubeflow-system create token kubeflow-trainer-controller-manager --audience disttrain-devcluster-issuer \
    --duration 24h >"$TRAINER_ISSUER_TOKEN" || die "cannot write Trainer's issuer token $TRAINER_ISSUER_TOKEN"
  start issuer-proxy "$CLUSTER_SRC_DIR/issuer_proxy.py" "$DEVCLUSTER_ISSUER_PROXY_PORT" "$SA_ISSUER_HOST" "$DEVCLUSTER_APISERVER_PORT"
  HTTPS_PROXY="http://127.0.0.1:$DEVCLUSTER_ISSUER_PROXY_PORT" TMPDIR="$TRAINER_TMPDIR" KUBECONFIG="$PKI_DIR/trainer.kubeconfig" start trainer --kubeconfig "$PKI_DIR/trainer.kubeconfig" --config "$DEVCLUSTER_DIR/trainer-config.yaml"
else
  log "starting Kueue $KUEUE_VERSION"
fi
KUBECONFIG="$PKI_DIR/kueue.kubeconfig" start kueue --kubeconfig "$PKI_DIR/kueue.kubeconfig" --config "$DEVCLUSTER_DIR/kueue-config.yaml"
render_webhooks >"$DEVCLUSTER_DIR/webhooks.yaml" || die "rendering the webhook configurations failed"
kc apply -f "$DEVCLUSTER_DIR/webhooks.yaml" >>"$LOG_DIR/apply.log" 2>&1 \
  || { tail -n 20 "$LOG_DIR/apply.log" >&2; die "registering the webhooks failed"; }

# ----------------------------------------------------------------------- wait
nodes_ready() { [ "$(kc get nodes --no-headers 2>/dev/null | grep -c ' Ready ')" -ge "$NODE_COUNT" ]; }
default_sa() { kc -n default get serviceaccount default; }
wait_for kube-controller-manager "kube-controller-manager /healthz" https_ok "https://127.0.0.1:$DEVCLUSTER_CONTROLLER_MANAGER_PORT/healthz"
wait_for kube-scheduler "kube-scheduler /healthz" https_ok "https://127.0.0.1:$DEVCLUSTER_SCHEDULER_PORT/healthz"
wait_for kwok "kwok /healthz" https_ok "https://127.0.0.1:$DEVCLUSTER_KUBELET_PORT/healthz"
if has_process node-runner; then wait_for node-runner "node runner /healthz" node_runner_ok; fi
wait_for kwok "$NODE_COUNT nodes Ready (kwok's two$(has_process node-runner && echo ", $EXEC_NODE"))" nodes_ready
wait_for kube-controller-manager "ServiceAccount default/default" default_sa
wait_for training-operator "training-operator /readyz" http_ok "http://127.0.0.1:$DEVCLUSTER_TRAINING_OPERATOR_HEALTH_PORT/readyz"
wait_for training-operator "training-operator pytorchjob controller workers" log_has training-operator 'Starting workers.*pytorchjob'
if has_process mpi-operator; then
  wait_for mpi-operator "mpi-operator workers started" log_has mpi-operator 'Started workers'
  wait_for mpi-operator "mpi-operator /healthz${MPI_NETNS:+ (in network namespace $MPI_NETNS)}" mpi_operator_healthy
fi
if has_process trainer; then
  wait_for jobset "JobSet controller /readyz (webhook serving)" http_ok "http://127.0.0.1:$DEVCLUSTER_JOBSET_HEALTH_PORT/readyz"
  wait_for trainer "Trainer controller manager /readyz (webhook serving)" http_ok "http://127.0.0.1:$DEVCLUSTER_TRAINER_HEALTH_PORT/readyz"
  wait_for trainer "Trainer status server on :$DEVCLUSTER_TRAINER_STATUS_PORT" port_in_use "$DEVCLUSTER_TRAINER_STATUS_PORT"
fi
wait_for kueue "Kueue /readyz (webhook serving)" http_ok "http://127.0.0.1:$DEVCLUSTER_KUEUE_HEALTH_PORT/readyz"

# Trainer's ClusterTrainingRuntimes and Kueue's queues pass through their
# webhooks, so they are applied once those serve (retried until the timeout).
applied() { kc apply -f "$1" >>"$LOG_DIR/apply.log" 2>&1; }
if has_process trainer; then
  kc kustomize "$TRAINER_DIR/manifests/base/runtimes" >"$DEVCLUSTER_DIR/runtimes.yaml" || die "rendering Trainer's runtimes failed"
  wait_for trainer "ClusterTrainingRuntimes applied (see $LOG_DIR/apply.log)" applied "$DEVCLUSTER_DIR/runtimes.yaml"
fi
render_kueue_queues >"$DEVCLUSTER_DIR/kueue-queues.yaml"
wait_for kueue "Kueue ResourceFlavor/ClusterQueue/LocalQueue applied (see $LOG_DIR/apply.log)" applied "$DEVCLUSTER_DIR/kueue-queues.yaml"
if [ "$DEVCLUSTER_ROLE" = worker ]; then
  # The manager's side: the worker's kubeconfig Secret, MultiKueueCluster, MultiKueueConfig,
  # AdmissionCheck and the ClusterQueue/LocalQueues that dispatch here (controllers.sh), applied
  # through the manager's webhooks; then wait until its Kueue reports the worker connected.
  render_multikueue_manager >"$DEVCLUSTER_DIR/multikueue-manager.yaml"
  manager_applied() { kc_manager apply -f "$DEVCLUSTER_DIR/multikueue-manager.yaml" >>"$LOG_DIR/apply.log" 2>&1; }
  worker_connected() {
    kc_manager get multikueuecluster "$MULTIKUEUE_CLUSTER" -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' | grep -qx True \
      && kc_manager get clusterqueue "$MULTIKUEUE_QUEUE" -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' | grep -qx True
  }
  log "configuring MultiKueue on the manager (https://127.0.0.1:$MANAGER_APISERVER_PORT): cluster $MULTIKUEUE_CLUSTER, ClusterQueue/LocalQueue $MULTIKUEUE_QUEUE"
  wait_for kueue "MultiKueue objects applied on the manager (see $LOG_DIR/apply.log)" manager_applied
  wait_for kueue "the manager's MultiKueueCluster $MULTIKUEUE_CLUSTER and ClusterQueue $MULTIKUEUE_QUEUE Active" worker_connected
fi

for p in "${PROCESSES[@]}"; do
  running_pid "$p" >/dev/null || fail_component "$p" "$p exited during startup"
done

mkdir -p "$DEVCLUSTER_DIR/bin"
ln -sf "$(component_bin kubectl)" "$DEVCLUSTER_DIR/bin/kubectl"
log "${DEVCLUSTER_ROLE/manager/cluster} up in $((SECONDS - T0))s"
echo "  export KUBECONFIG=$KUBECONFIG_FILE"
echo "  kubectl: $DEVCLUSTER_DIR/bin/kubectl (kubectl $KUBERNETES_VERSION)"
