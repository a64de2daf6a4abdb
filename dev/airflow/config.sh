#!/usr/bin/env bash
# Writes the deployment's configuration: secrets (generated once, kept in .devairflow/secrets.env),
# $AIRFLOW_HOME/airflow.cfg rendered from dev/airflow/airflow.cfg.template, and the DAGs folder
# .devairflow/dags/ filled with the example DAGs (files a user added there are left alone), and
# $AIRFLOW_HOME/config/airflow_local_settings.py (dev/airflow/airflow_local_settings.py).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$AIRFLOW_HOME" "$AF_DAGS_DIR" "$AF_LOG_DIR" "$AF_PID_DIR"
if [ ! -s "$AF_SECRETS_FILE" ]; then
  (
    umask 077
    "$VENV_BIN/python" - >"$AF_SECRETS_FILE" <<'PY'
import secrets
from cryptography.fernet import Fernet
print(f"FERNET_KEY={Fernet.generate_key().decode()}")
# HS512 wants a key of at least 64 bytes.
print(f"JWT_SECRET={secrets.token_urlsafe(64)}")
print(f"API_SECRET_KEY={secrets.token_urlsafe(32)}")
PY
  )
fi
# shellcheck source=/dev/null
source "$AF_SECRETS_FILE"

render() {
  local key value text
  text="$(cat "$DEVAIRFLOW_SRC_DIR/airflow.cfg.template")"
  while [ $# -gt 0 ]; do
    key="$1" value="$2"; shift 2
    text="${text//@$key@/$value}"
  done
  printf '%s\n' "$text"
}
(
  umask 077
  render DAGS_DIR "$AF_DAGS_DIR" LOG_DIR "$AF_LOG_DIR" API_URL "$DEVAIRFLOW_API_URL" API_PORT "$DEVAIRFLOW_API_PORT" \
    PG_USER "$PG_USER" PG_DATABASE "$PG_DATABASE" PG_SOCKET_DIR "$PG_SOCKET_DIR" PG_PORT "$PG_PORT" \
    WORKER_LOG_PORT "$DEVAIRFLOW_WORKER_LOG_PORT" TRIGGER_LOG_PORT "$DEVAIRFLOW_TRIGGER_LOG_PORT" \
    FERNET_KEY "$FERNET_KEY" JWT_SECRET "$JWT_SECRET" API_SECRET_KEY "$API_SECRET_KEY" \
    USE_JOB_SCHEDULE "$DEVAIRFLOW_USE_JOB_SCHEDULE" TRIGGERER_QUEUES_ENABLED "$TRIGGERER_QUEUES_ENABLED" \
    OPENLINEAGE_FILE "$AF_OPENLINEAGE_FILE" STATSD_PORT "$DEVAIRFLOW_STATSD_PORT" >"$AIRFLOW_HOME/airflow.cfg.new"
)
mv "$AIRFLOW_HOME/airflow.cfg.new" "$AIRFLOW_HOME/airflow.cfg"
grep -q '@[A-Z_]*@' "$AIRFLOW_HOME/airflow.cfg" && die "unfilled placeholder in $AIRFLOW_HOME/airflow.cfg"

# The example DAGs (and the manifests they load) are copied, not linked: the folder is the user's to edit.
# The Task Loops example needs Airflow 3.4 (docs/guides/airflow-3.4.md): an older Airflow would show it as an
# import error, so it stays out of that deployment's folder.
needs_loops=()
"$VENV_BIN/python" -c 'import airflow.sdk.definitions._internal.loop' 2>/dev/null || needs_loops=(--exclude=retraining_loop.py)
tar -C "$REPO_ROOT/example_dags" --exclude=__pycache__ "${needs_loops[@]}" -cf - . | tar -C "$AF_DAGS_DIR" -xf -
# The cluster policies that fit the examples, unchanged, to the local cluster (the file says how and why):
# Airflow imports airflow_local_settings from $AIRFLOW_HOME/config in every process.
mkdir -p "$AIRFLOW_HOME/config"
cp "$DEVAIRFLOW_SRC_DIR/airflow_local_settings.py" "$AIRFLOW_HOME/config/airflow_local_settings.py"
