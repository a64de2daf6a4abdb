#!/usr/bin/env bash
# Shows the local Airflow deployment (make airflow-status): PostgreSQL, each Airflow process, and
# the API server's health report. Exit code 0 if everything runs and reports healthy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ok=0
if [ -f "$PG_DATA/PG_VERSION" ] && pg_ready; then
  printf '  %-14s running  socket %s\n' postgresql "$PG_SOCKET_DIR"
else
  printf '  %-14s stopped\n' postgresql; ok=1
fi
mapfile -t processes < <(started_processes)
for name in "${processes[@]}"; do
  if pid="$(airflow_pid "$name")"; then
    rss_kb="$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")"
    printf '  %-14s running  pid %-8s rss %5d MB  log %s\n' "$name" "$pid" $((rss_kb / 1024)) "$AF_LOG_DIR/$name.log"
  else
    printf '  %-14s stopped\n' "$name"; ok=1
  fi
done
if airflow_healthy; then
  echo "Airflow healthy at $DEVAIRFLOW_API_URL (credentials: $AF_ENV_FILE)"
else
  echo "Airflow API health: $(api_health || echo 'no answer')"; ok=1
fi
exit "$ok"
