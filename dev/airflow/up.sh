#!/usr/bin/env bash
# Starts the local Airflow deployment against the local cluster (make airflow-up): PostgreSQL,
# `airflow db migrate`, then the api-server, scheduler (LocalExecutor), dag-processor and triggerer,
# each supervised (restarted when it dies) and logging to .devairflow/logs/NAME.log. Writes
# .devairflow/env (AIRFLOW_API_URL, AIRFLOW_API_TOKEN) and prints how to log in to the UI.
# Idempotent: what already runs is left running (a healthy deployment only gets a fresh token).
# Needs the local cluster (make cluster-up) and the repository's venv (make venv).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The daemons started from here (PostgreSQL, the supervisors and Airflow) must not inherit the
# caller's open files: under `flock LOCK make airflow-up` they would hold LOCK for as long as they run.
# (255 is the file bash reads this script from.)
for fd in /proc/$$/fd/*; do
  fd="${fd##*/}"
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-"; fi
done

T0=$SECONDS
STARTUP_TIMEOUT="${DEVAIRFLOW_STARTUP_TIMEOUT:-180}"
[ -x "$AIRFLOW_BIN" ] || die "$AIRFLOW_BIN not found (run: make venv)"
[ ${#DEVAIRFLOW_IGNORED_VARS[@]} -eq 0 ] \
  || log "ignoring the caller's ${DEVAIRFLOW_IGNORED_VARS[*]} (the deployment's settings are in dev/airflow/airflow.cfg.template)"

"$DEVAIRFLOW_SRC_DIR/postgres.sh"
config_before="$(cat "$AIRFLOW_HOME/airflow.cfg" 2>/dev/null || true)"
"$DEVAIRFLOW_SRC_DIR/config.sh"
# A process reads airflow.cfg when it starts: one already running keeps the settings it started with.
if [ "$config_before" != "$(cat "$AIRFLOW_HOME/airflow.cfg")" ]; then
  running=()
  for name in $(started_processes); do supervisor_pid "$name" >/dev/null && running+=("$name"); done
  [ ${#running[@]} -eq 0 ] || log "airflow.cfg changed: ${running[*]} keep their old settings until restarted (make airflow-down airflow-up)"
fi
"$DEVAIRFLOW_SRC_DIR/connection.sh"

# Migrate only when Airflow's version changed since the last migration (a check costs an Airflow start).
airflow_version="$("$VENV_BIN/python" -c 'import importlib.metadata as m; print(m.version("apache-airflow-core"))')"
stamp="$DEVAIRFLOW_DIR/migrated-$airflow_version"
if [ ! -f "$stamp" ]; then
  log "airflow db migrate (Airflow $airflow_version)"
  "$AIRFLOW_BIN" db migrate >"$AF_LOG_DIR/db-migrate.log" 2>&1 \
    || { tail -n 30 "$AF_LOG_DIR/db-migrate.log" >&2; die "airflow db migrate failed"; }
  # The connection lives in the metadata database, so the UI lists it and users can edit it.
  connection_file="$DEVAIRFLOW_DIR/connections.json"
  "$VENV_BIN/python" -c '
import json, sys
extra = {"kube_config_path": sys.argv[1], "namespace": sys.argv[2]}
print(json.dumps({"kubernetes_default": {"conn_type": "kubernetes", "extra": json.dumps(extra),
      "description": "Local test cluster, as the service account holding deploy/rbac/role.yaml"}}))
' "$AF_KUBECONFIG" "$DEVAIRFLOW_NAMESPACE" >"$connection_file"
  "$AIRFLOW_BIN" connections import --overwrite "$connection_file" >>"$AF_LOG_DIR/db-migrate.log" 2>&1 \
    || { tail -n 30 "$AF_LOG_DIR/db-migrate.log" >&2; die "importing the kubernetes_default connection failed"; }
  rm -f "$DEVAIRFLOW_DIR"/migrated-*
  touch "$stamp"
fi

# ------------------------------------------------------------------ processes
started=()
for name in "${AIRFLOW_PROCESSES[@]}"; do
  if supervisor_pid "$name" >/dev/null; then continue; fi
  if [ "$name" = api-server ] && port_in_use "$DEVAIRFLOW_API_PORT"; then
    die "port $DEVAIRFLOW_API_PORT is in use by another program (set DEVAIRFLOW_API_PORT)"
  fi
  : >>"$AF_LOG_DIR/$name.log"
  # The venv's bin first on PATH: task processes and the triggerer run the venv's Python.
  # shellcheck disable=SC2046 # the command's words
  PATH="$VENV_BIN:$PATH" setsid "$DEVAIRFLOW_SRC_DIR/supervise.sh" "$name" "$AIRFLOW_BIN" $(airflow_command "$name") \
    </dev/null >>"$AF_LOG_DIR/$name.log" 2>&1 &
  echo $! >"$AF_PID_DIR/$name.supervisor.pid"
  started+=("$name")
done
[ ${#started[@]} -eq 0 ] || log "started ${started[*]} (logs: $AF_LOG_DIR/)"

# ----------------------------------------------------------------------- wait
until airflow_healthy; do
  for name in "${AIRFLOW_PROCESSES[@]}"; do
    supervisor_pid "$name" >/dev/null || die "the supervisor of $name exited; see $AF_LOG_DIR/$name.log"
  done
  if [ $((SECONDS - T0)) -ge "$STARTUP_TIMEOUT" ]; then
    for name in "${AIRFLOW_PROCESSES[@]}"; do
      echo "---- last 15 lines of $AF_LOG_DIR/$name.log" >&2; tail -n 15 "$AF_LOG_DIR/$name.log" >&2
    done
    die "Airflow not healthy after ${STARTUP_TIMEOUT}s (health: $(api_health || echo 'no answer'))"
  fi
  sleep 1
done

"$DEVAIRFLOW_SRC_DIR/token.sh"
log "Airflow up in $((SECONDS - T0))s"
