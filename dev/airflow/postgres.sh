#!/usr/bin/env bash
# Starts the Airflow metadata database: PostgreSQL 15 from the machine's Debian package, as a plain
# process with its data in .devairflow/postgres/data. It listens on a unix socket in
# .devairflow/postgres/run only (no TCP listener), so nothing off this machine, nor any other user,
# can reach it. Idempotent: creates the cluster and the `airflow` database the first time, starts
# the server if it is not running, and returns once it accepts connections.
# Usage: dev/airflow/postgres.sh [start|stop]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ -x "$PG_BIN_DIR/initdb" ] || die "PostgreSQL 15 not found in $PG_BIN_DIR: apt-get install postgresql-15"

if [ "${1:-start}" = stop ]; then
  if [ -f "$PG_DATA/postmaster.pid" ]; then
    pg_ctl_ stop -m fast -w >/dev/null && log "stopped PostgreSQL"
  fi
  exit 0
fi

# The socket path must fit in sockaddr_un (107 bytes).
socket_path="$PG_SOCKET_DIR/.s.PGSQL.$PG_PORT"
[ "${#socket_path}" -le 100 ] || die "socket path too long ($socket_path); set DEVAIRFLOW_DIR to a shorter path"

mkdir -p "$PG_DIR"
if [ "$(id -u)" -eq 0 ]; then
  # The server runs as `postgres`: it must reach its directory through the repository's path.
  chown postgres: "$PG_DIR"
  if ! runuser -u postgres -- test -w "$PG_DIR"; then
    # A parent directory is closed to other users (a checkout under a mode-700 folder): keep the data
    # in the postgres user's home instead, fresh for this checkout, and link it from .devairflow/.
    alt="$(getent passwd postgres | cut -d: -f6)/devairflow-$(printf '%s' "$DEVAIRFLOW_DIR" | sha1sum | cut -c1-12)"
    log "user postgres cannot reach $PG_DIR; keeping PostgreSQL's data in $alt"
    rm -rf "$alt" && mkdir -p "$alt" && chown postgres: "$alt"
    rmdir "$PG_DIR" && ln -s "$alt" "$PG_DIR"
    PG_DIR="$alt" PG_DATA="$alt/data" PG_SOCKET_DIR="$alt/run"
  fi
fi

if [ ! -f "$PG_DATA/PG_VERSION" ]; then
  log "initialising a PostgreSQL cluster in $PG_DATA"
  pg_run mkdir -p "$PG_DATA" "$PG_SOCKET_DIR"
  pg_run chmod 700 "$PG_SOCKET_DIR"
  # Trust on the socket: the socket directory (mode 700) is the access control. No TCP access at all.
  pg_run "$PG_BIN_DIR/initdb" -D "$PG_DATA" -U "$PG_USER" -E UTF8 --locale C.UTF-8 \
    --auth-local trust --auth-host reject >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
  pg_run tee -a "$PG_DATA/postgresql.conf" >/dev/null <<EOF
# --- devairflow (dev/airflow/postgres.sh) ---
listen_addresses = ''                    # unix socket only
unix_socket_directories = '$PG_SOCKET_DIR'
port = $PG_PORT
# Every Airflow process keeps a SQLAlchemy pool, and LocalExecutor task processes open their own.
max_connections = 200
# A throwaway development database on a small shared machine: small buffers, and no fsync
# (a crash of the machine may lose the last transactions; a crash of a process loses nothing).
shared_buffers = 64MB
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
fi

if ! pg_ctl_ status >/dev/null 2>&1; then
  log "starting PostgreSQL ($("$PG_BIN_DIR/postgres" --version | awk '{print $3}'), socket $PG_SOCKET_DIR)"
  pg_run touch "$PG_DIR/postgres.log"
  pg_ctl_ start -w -t 60 -l "$PG_DIR/postgres.log" >/dev/null \
    || { tail -n 30 "$PG_DIR/postgres.log" >&2; die "PostgreSQL did not start"; }
fi

db_exists() {
  "$PG_BIN_DIR/psql" -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$PG_DATABASE'" | grep -q 1
}
if ! db_exists; then
  "$PG_BIN_DIR/createdb" -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U "$PG_USER" "$PG_DATABASE" \
    || die "could not create database $PG_DATABASE"
fi
pg_ready || die "PostgreSQL does not accept connections on $PG_SOCKET_DIR"
