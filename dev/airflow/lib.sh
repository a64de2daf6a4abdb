# Common settings for the dev/airflow/*.sh scripts (the local Airflow deployment). Sourced, not executed.
# Reuses dev/cluster/lib.sh for log/die/port_in_use/kc/apiserver_ready and the cluster's paths.
# shellcheck shell=bash

DEVAIRFLOW_SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
source "$DEVAIRFLOW_SRC_DIR/../cluster/lib.sh"

# The deployment sets every Airflow setting it depends on itself (airflow.cfg.template): a caller's
# AIRFLOW__SECTION__KEY variables (which Airflow ranks above airflow.cfg), AIRFLOW_CONFIG (another
# config file), AIRFLOW_CONN_* and AIRFLOW_VAR_* (which shadow the connection and variables stored in
# the metadata database) would otherwise reach every process started from here. An Airflow user's
# shell often exports some (AIRFLOW__CORE__DAGS_FOLDER, say): the deployment would then parse another
# folder while printing .devairflow/dags. Change the deployment through the template or DEVAIRFLOW_*.
DEVAIRFLOW_IGNORED_VARS=()
while IFS= read -r name; do
  case "$name" in
    AIRFLOW__* | AIRFLOW_CONFIG | AIRFLOW_CONN_* | AIRFLOW_VAR_*) DEVAIRFLOW_IGNORED_VARS+=("$name"); unset "$name" ;;
  esac
done < <(compgen -e)

DEVAIRFLOW_DIR="${DEVAIRFLOW_DIR:-$REPO_ROOT/.devairflow}"
mkdir -p "$DEVAIRFLOW_DIR"
DEVAIRFLOW_DIR="$(cd "$DEVAIRFLOW_DIR" && pwd)"
# AIRFLOW_HOME lives inside .devairflow/ so that nothing here ever reads or writes ~/airflow.
export AIRFLOW_HOME="$DEVAIRFLOW_DIR/home"
AF_PID_DIR="$DEVAIRFLOW_DIR/pids"
AF_LOG_DIR="$DEVAIRFLOW_DIR/logs"
AF_DAGS_DIR="$DEVAIRFLOW_DIR/dags"
AF_ENV_FILE="$DEVAIRFLOW_DIR/env"
AF_SECRETS_FILE="$DEVAIRFLOW_DIR/secrets.env"
AF_KUBECONFIG="$DEVAIRFLOW_DIR/kubeconfig"
VENV_BIN="$REPO_ROOT/.venv/bin"
AIRFLOW_BIN="$VENV_BIN/airflow"

# mpi-operator's health server holds :8080 on every address (not configurable, see dev/cluster/lib.sh),
# so the API server listens next to it. Override with DEVAIRFLOW_API_PORT.
DEVAIRFLOW_API_PORT="${DEVAIRFLOW_API_PORT:-28080}"
DEVAIRFLOW_API_URL="http://127.0.0.1:$DEVAIRFLOW_API_PORT"
# The scheduler's and the triggerer's log servers (defaults 8793/8794 clash with any other Airflow).
DEVAIRFLOW_WORKER_LOG_PORT="${DEVAIRFLOW_WORKER_LOG_PORT:-28793}"
DEVAIRFLOW_TRIGGER_LOG_PORT="${DEVAIRFLOW_TRIGGER_LOG_PORT:-28794}"
# Where every process sends its metrics (StatsD over UDP on loopback; Airflow's own and the provider's
# disttrain.*): point a StatsD agent or `nc -ul 127.0.0.1 28125` at it. Nothing needs to listen.
DEVAIRFLOW_STATSD_PORT="${DEVAIRFLOW_STATSD_PORT:-28125}"

# Where the provider's jobs go: one namespace whose service account holds exactly deploy/rbac/role.yaml.
DEVAIRFLOW_NAMESPACE="${DEVAIRFLOW_NAMESPACE:-disttrain-airflow}"
# Where the Airflow processes see the retraining example's shared volume: the hostPath behind the
# namespace's `training-data` claim (dev/demo/cluster_setup.py shared_storage()), which the pods mount
# at /mnt/shared (the deployment's task_policy points the examples there: airflow_local_settings.py).
export DISTTRAIN_SHARED_STORAGE="/tmp/disttrain-$DEVAIRFLOW_NAMESPACE"
DEVAIRFLOW_SERVICE_ACCOUNT=airflow-disttrain

# PostgreSQL from the machine's Debian package (postgresql-15).
PG_BIN_DIR="${DEVAIRFLOW_PG_BIN_DIR:-/usr/lib/postgresql/15/bin}"
PG_DIR="$DEVAIRFLOW_DIR/postgres"          # data/, run/ (the unix socket), postgres.log
# A link when the `postgres` user cannot reach .devairflow/ (see postgres.sh): use the real path.
[ -L "$PG_DIR" ] && PG_DIR="$(readlink -f "$PG_DIR")"
PG_DATA="$PG_DIR/data"
PG_SOCKET_DIR="$PG_DIR/run"
PG_PORT=5432                               # only names the socket file: no TCP listener at all
PG_DATABASE=airflow
PG_USER=airflow

# Triggerers (DEVAIRFLOW_TRIGGERERS=2 for high availability, as `make e2e-test` runs): triggerer,
# triggerer-2, ... Airflow spreads the triggers over them and moves a dead one's triggers to the others.
DEVAIRFLOW_TRIGGERERS="${DEVAIRFLOW_TRIGGERERS:-1}"
[[ "$DEVAIRFLOW_TRIGGERERS" =~ ^[1-9]$ ]] || die "DEVAIRFLOW_TRIGGERERS must be 1 to 9, not '$DEVAIRFLOW_TRIGGERERS'"
TRIGGERERS=(triggerer)
for ((i = 2; i <= DEVAIRFLOW_TRIGGERERS; i++)); do TRIGGERERS+=("triggerer-$i"); done
# Triggerers serving task queues (Airflow's [triggerer] queues_enabled): DEVAIRFLOW_TRIGGERER_QUEUES="default
# training" starts triggerer-for-default (`airflow triggerer --queues default`) and triggerer-for-training
# besides the above, and turns queues_enabled on: a deferred task's trigger then carries the task's
# `queue` and runs only on a triggerer started with --queues naming it (the above, started without
# --queues, then run only triggers that carry no queue). A comma joins queues one triggerer serves
# ("default,training"). Empty (the default): queues_enabled stays off.
DEVAIRFLOW_TRIGGERER_QUEUES="${DEVAIRFLOW_TRIGGERER_QUEUES:-}"
for queues in $DEVAIRFLOW_TRIGGERER_QUEUES; do
  [[ "$queues" =~ ^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$ ]] || die "DEVAIRFLOW_TRIGGERER_QUEUES: bad queue list '$queues'"
  TRIGGERERS+=("triggerer-for-$queues")
done
TRIGGERER_QUEUES_ENABLED=False
[ -z "$DEVAIRFLOW_TRIGGERER_QUEUES" ] || TRIGGERER_QUEUES_ENABLED=True
# [scheduler] use_job_schedule (airflow.cfg.template says why it is off): True creates the runs of
# schedules and of Asset-triggered DAGs.
DEVAIRFLOW_USE_JOB_SCHEDULE="${DEVAIRFLOW_USE_JOB_SCHEDULE:-False}"
[[ "$DEVAIRFLOW_USE_JOB_SCHEDULE" =~ ^(True|False)$ ]] \
  || die "DEVAIRFLOW_USE_JOB_SCHEDULE must be True or False, not '$DEVAIRFLOW_USE_JOB_SCHEDULE'"
# Where the openlineage provider's file transport appends the deployment's OpenLineage events.
AF_OPENLINEAGE_FILE="$AF_LOG_DIR/openlineage.jsonl"

# Airflow processes, in start order (down.sh stops them in reverse).
AIRFLOW_PROCESSES=(scheduler dag-processor "${TRIGGERERS[@]}" api-server)

# The Airflow command of a process: `airflow triggerer` for triggerer-2 too. Extra triggerers run no
# log server of their own (its port is the first one's); the first one's serves the same log folder.
airflow_command() {
  case "$1" in
    triggerer-for-*) echo "triggerer --skip-serve-logs --queues ${1#triggerer-for-}" ;;
    triggerer-*) echo "triggerer --skip-serve-logs" ;;
    *) echo "$1" ;;
  esac
}

# Processes started by an earlier up.sh, whatever DEVAIRFLOW_TRIGGERERS it ran with (for down/status).
started_processes() {
  local names=("${AIRFLOW_PROCESSES[@]}") file name
  for file in "$AF_PID_DIR"/*.supervisor.pid; do
    [ -e "$file" ] || continue
    name="$(basename "$file" .supervisor.pid)"
    [[ " ${names[*]} " == *" $name "* ]] || names=("${names[@]:0:${#names[@]}-1}" "$name" "${names[-1]}")
  done
  printf '%s\n' "${names[@]}"
}

# PostgreSQL refuses to run as root; as root its commands run as the package's `postgres` user.
pg_run() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}
pg_ctl_() { pg_run "$PG_BIN_DIR/pg_ctl" -D "$PG_DATA" "$@"; }
pg_ready() { "$PG_BIN_DIR/pg_isready" -q -h "$PG_SOCKET_DIR" -p "$PG_PORT" -d "$PG_DATABASE" -U "$PG_USER"; }

# Prints the pid of a running Airflow process started by up.sh (its supervisor writes the pid), or fails.
airflow_pid() {
  local pidfile="$AF_PID_DIR/$1.pid" pid
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  # The api-server renames itself "airflow api_server -- host:... port:...".
  local command
  command="$(airflow_command "$1")"
  command="${command%% *}"
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq "airflow ($command|${command//-/_})( |$)" || return 1
  echo "$pid"
}

supervisor_pid() {
  local pidfile="$AF_PID_DIR/$1.supervisor.pid" pid
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  echo "$pid"
}

api_health() { curl -sf --max-time 3 "$DEVAIRFLOW_API_URL/api/v2/monitor/health"; }

# True when the API server answers and reports every component healthy.
airflow_healthy() {
  local health
  health="$(api_health)" || return 1
  "$VENV_BIN/python" -c '
import json, sys
health = json.loads(sys.argv[1])
parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
sys.exit(0 if all(health.get(p, {}).get("status") == "healthy" for p in parts) else 1)' "$health"
}
