#!/usr/bin/env bash
# Stops the local Airflow deployment (make airflow-down): each supervisor stops its Airflow process
# group (SIGTERM, then SIGKILL after 15 s) and exits; then PostgreSQL stops. Data, logs, the DAGs
# folder and the secrets stay in .devairflow/ (make clean removes them).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stopped=0
mapfile -t processes < <(started_processes)
for ((i = ${#processes[@]} - 1; i >= 0; i--)); do
  name="${processes[$i]}"
  if pid="$(supervisor_pid "$name")"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ ! -d "/proc/$pid" ] || kill -KILL "$pid" 2>/dev/null || true
    stopped=$((stopped + 1))
  fi
  # A process left behind by a supervisor that was killed itself.
  if pid="$(airflow_pid "$name")"; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$AF_PID_DIR/$name.supervisor.pid" "$AF_PID_DIR/$name.pid"
done
"$DEVAIRFLOW_SRC_DIR/postgres.sh" stop
log "Airflow down ($stopped process(es) stopped)"
