#!/usr/bin/env bash
# Asks the running API server for a REST API token (POST /auth/token as the simple auth manager's
# `admin`; valid for [api_auth] jwt_expiration_time = 48 h), writes .devairflow/env for scripts and
# tests (`source .devairflow/env`, then `curl -H "Authorization: Bearer $AIRFLOW_API_TOKEN"
# "$AIRFLOW_API_URL/api/v2/dags"`), and prints how to log in to the UI.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

passwords="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
[ -s "$passwords" ] || die "$passwords not found: is the API server running? (make airflow-status)"
password="$("$VENV_BIN/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["admin"])' "$passwords")"
body="$("$VENV_BIN/python" -c 'import json, sys; print(json.dumps({"username": "admin", "password": sys.argv[1]}))' "$password")"
response="$(curl -sf --max-time 10 -H 'Content-Type: application/json' -d "$body" "$DEVAIRFLOW_API_URL/auth/token")" \
  || die "POST $DEVAIRFLOW_API_URL/auth/token failed"
token="$("$VENV_BIN/python" -c 'import json, sys; print(json.loads(sys.argv[1])["access_token"])' "$response")"
(
  umask 077
  cat >"$AF_ENV_FILE" <<ENV
# Written by dev/airflow/token.sh (make airflow-up). Use: source $AF_ENV_FILE
export AIRFLOW_API_URL=$DEVAIRFLOW_API_URL
export AIRFLOW_API_TOKEN=$token
ENV
)
cat <<MSG
  Airflow UI:  $DEVAIRFLOW_API_URL   (user: admin, password: $password)
  REST API:    source $AF_ENV_FILE; curl -H "Authorization: Bearer \$AIRFLOW_API_TOKEN" \$AIRFLOW_API_URL/api/v2/dags
  DAGs folder: $AF_DAGS_DIR   logs: $AF_LOG_DIR/   AIRFLOW_HOME=$AIRFLOW_HOME
MSG
