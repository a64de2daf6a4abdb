#!/usr/bin/env bash
# A second API server of the local deployment (make airflow-up must be up), with the FAB auth manager:
# the deployment's SimpleAuthManager has roles only, FAB's roles can grant single DAGs. Same metadata
# database, configuration and JWT secret; its own port (DEVAIRFLOW_FAB_API_PORT, 28081) and FAB's tables.
# Users: `platform` (Admin) and one per FAB_GRANTS word `<user>=<dag_id>`, whose role reads that DAG only
# (default `one-dag=$FAB_DAG`, FAB_DAG default disttrain_manifest_first); their passwords go to
# .devairflow/fab-users.json.
#   dev/airflow/fab-api-server.sh start | stop
# tests/e2e/test_ui_per_dag_access.py starts it for the UI's per-DAG access test and stops it after.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FAB_PORT="${DEVAIRFLOW_FAB_API_PORT:-28081}"
FAB_DAG="${FAB_DAG:-disttrain_manifest_first}"
FAB_GRANTS="${FAB_GRANTS:-one-dag=$FAB_DAG}"
FAB_LOG="$AF_LOG_DIR/fab-api-server.log"
FAB_PID="$AF_PID_DIR/fab-api-server.pid"
FAB_USERS="$DEVAIRFLOW_DIR/fab-users.json"
export AIRFLOW__CORE__AUTH_MANAGER=airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager
export AIRFLOW__API__PORT="$FAB_PORT" AIRFLOW__API__BASE_URL="http://127.0.0.1:$FAB_PORT" AIRFLOW__API__WORKERS=1

fab() { "$AIRFLOW_BIN" "$@" >>"$FAB_LOG" 2>&1 || { tail -n 20 "$FAB_LOG" >&2; die "airflow $* failed"; }; }

stop() {
  [ -f "$FAB_PID" ] || return 0
  kill -TERM -- "-$(cat "$FAB_PID")" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$(cat "$FAB_PID")" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$(cat "$FAB_PID")" 2>/dev/null || true
  rm -f "$FAB_PID"
  log "FAB API server stopped"
}

start() {
  stop
  port_in_use "$FAB_PORT" && die "port $FAB_PORT is in use (set DEVAIRFLOW_FAB_API_PORT)"
  mkdir -p "$AF_LOG_DIR" "$AF_PID_DIR"
  : >"$FAB_LOG"
  T0=$SECONDS
  fab fab-db migrate
  # shellcheck disable=SC2086 # one argument per grant
  "$VENV_BIN/python" "$DEVAIRFLOW_SRC_DIR/fab_users.py" "$FAB_USERS" $FAB_GRANTS >>"$FAB_LOG" 2>&1 \
    || { tail -n 20 "$FAB_LOG" >&2; die "creating the FAB roles and users failed"; }
  PATH="$VENV_BIN:$PATH" setsid "$AIRFLOW_BIN" api-server --port "$FAB_PORT" </dev/null >>"$FAB_LOG" 2>&1 &
  echo $! >"$FAB_PID"
  until curl -fsS "http://127.0.0.1:$FAB_PORT/api/v2/monitor/health" >/dev/null 2>&1; do
    kill -0 "$(cat "$FAB_PID")" 2>/dev/null || { tail -n 30 "$FAB_LOG" >&2; die "the FAB API server exited"; }
    [ $((SECONDS - T0)) -lt 180 ] || { tail -n 30 "$FAB_LOG" >&2; die "the FAB API server is not up after 180 s"; }
    sleep 1
  done
  log "FAB API server up on 127.0.0.1:$FAB_PORT in $((SECONDS - T0))s (users: $FAB_USERS)"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac
