#!/usr/bin/env bash
# Switches the Kueue of a running local cluster to the version in versions.env, restarting Kueue
# alone (the other components, their jobs and Kueue's queues and Workloads stay): for a cluster that
# was started before KUEUE_VERSION changed, which up.sh would otherwise stop and start whole.
#   1. builds the binary if it is not cached (dev/cluster/build.sh kueue);
#   2. renders Kueue's configuration and has the new binary load and validate it (strict decoding,
#      feature gates, validation) before anything is touched: it must fail only at the kubeconfig;
#   3. applies the new version's CRDs (server-side; the old Kueue keeps running meanwhile);
#   4. stops the old Kueue and starts the new one with the same command line and environment (its
#      webhooks have failurePolicy Fail: jobs of its kinds cannot be created while it is down, so
#      this is the only gap, a few seconds), waits for /readyz, then applies its webhook
#      registrations and the queues again.
# Usage: dev/cluster/upgrade-kueue.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=controllers.sh
source "$CLUSTER_SRC_DIR/controllers.sh"

pidfile="$PID_DIR/kueue.pid"
[ -f "$pidfile" ] || die "Kueue is not running (no $pidfile): start the cluster with up.sh"
pid="$(cat "$pidfile")"
[ -r "/proc/$pid/cmdline" ] || die "Kueue (pid $pid) is not running: start the cluster with up.sh"
mapfile -d '' argv <"/proc/$pid/cmdline"
mapfile -d '' environ <"/proc/$pid/environ"
new_bin="$(component_bin kueue)"
case "${argv[0]}" in
  "$BIN_CACHE"/kueue-*) ;;
  *) die "pid $pid runs ${argv[0]}, not a Kueue binary of $BIN_CACHE" ;;
esac
if [ "${argv[0]}" = "$new_bin" ]; then
  log "Kueue $KUEUE_VERSION already runs (pid $pid)"
  exit 0
fi

[ -x "$new_bin" ] || "$CLUSTER_SRC_DIR/build.sh" kueue

# The configuration, checked by the new binary itself before the running one is touched.
check_dir="$(mktemp -d)"
trap 'rm -rf "$check_dir"' EXIT
DEVCLUSTER_DIR="$check_dir" render_controller_configs
check_log="$check_dir/check.log"
"$new_bin" --config "$check_dir/kueue-config.yaml" --kubeconfig "$check_dir/no-kubeconfig" >"$check_log" 2>&1 || true
if ! grep -q '"unable to get kubeconfig"' "$check_log"; then
  tail -n 5 "$check_log" >&2
  die "Kueue $KUEUE_VERSION refused its configuration ($check_log above); nothing was changed"
fi
log "Kueue $KUEUE_VERSION accepts its configuration"

crd_args=()
for f in "$KUEUE_DIR"/config/components/crd/bases/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || crd_args+=(-f "$f")
done
kc apply --server-side --force-conflicts "${crd_args[@]}" >>"$LOG_DIR/apply.log" 2>&1 \
  || { tail -n 20 "$LOG_DIR/apply.log" >&2; die "applying Kueue $KUEUE_VERSION's CRDs failed"; }
kc wait --for condition=established --timeout=60s crd --all >>"$LOG_DIR/apply.log" 2>&1
render_controller_configs
render_webhooks >"$DEVCLUSTER_DIR/webhooks.yaml" || die "rendering the webhook configurations failed"

log "stopping Kueue (pid $pid, ${argv[0]##*/}); ${new_bin##*/} takes over"
# The new command line: the old one with the new binary.
argv[0]="$new_bin"
kill "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
start=$SECONDS
(close_inherited_fds; exec env -i "${environ[@]}" setsid "${argv[@]}") </dev/null >>"$LOG_DIR/kueue.log" 2>&1 &
echo $! >"$pidfile"
for _ in $(seq 1 600); do
  curl -sf --max-time 2 "http://127.0.0.1:$DEVCLUSTER_KUEUE_HEALTH_PORT/readyz" >/dev/null && break
  sleep 0.1
done
curl -sf --max-time 2 "http://127.0.0.1:$DEVCLUSTER_KUEUE_HEALTH_PORT/readyz" >/dev/null \
  || die "Kueue $KUEUE_VERSION is not ready 60 s after its start (see $LOG_DIR/kueue.log)"
log "Kueue $KUEUE_VERSION ready in $((SECONDS - start)) s (pid $(cat "$pidfile"))"
kc apply -f "$DEVCLUSTER_DIR/webhooks.yaml" >>"$LOG_DIR/apply.log" 2>&1 \
  || { tail -n 20 "$LOG_DIR/apply.log" >&2; die "registering the webhooks failed"; }
render_kueue_queues >"$DEVCLUSTER_DIR/kueue-queues.yaml"
kc apply -f "$DEVCLUSTER_DIR/kueue-queues.yaml" >>"$LOG_DIR/apply.log" 2>&1 \
  || { tail -n 20 "$LOG_DIR/apply.log" >&2; die "applying Kueue's queues failed"; }
log "Kueue switched to $KUEUE_VERSION"
