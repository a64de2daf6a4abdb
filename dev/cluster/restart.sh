#!/usr/bin/env bash
# Restarts one running component with the exact command line it runs with, after an optional
# downtime: fault injection for the integration tests (e.g. `dev/cluster/restart.sh kube-apiserver 3`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

name="${1:?usage: restart.sh COMPONENT [DOWNTIME_SECONDS]}"
downtime="${2:-0}"
pid="$(running_pid "$name")" || die "$name is not running"
mapfile -d '' argv <"/proc/$pid/cmdline"
# ... and the exact environment (e.g. the Trainer's TMPDIR, which holds its webhook cert dir).
mapfile -d '' environ <"/proc/$pid/environ"

log "stopping $name (pid $pid)"
kill "$pid"
# kube-apiserver drains its watches for a long while on SIGTERM; after 5 s it is killed like a crash.
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then die "$name (pid $pid) did not stop"; fi
sleep "$downtime"

log "starting $name again"
(close_inherited_fds; exec env -i "${environ[@]}" setsid "${argv[@]}") </dev/null >>"$LOG_DIR/$name.log" 2>&1 &
echo $! >"$PID_DIR/$name.pid"
if [ "$name" = kube-apiserver ]; then
  for _ in $(seq 1 600); do apiserver_ready && break; sleep 0.1; done
  apiserver_ready || die "kube-apiserver is not ready 60s after its restart"
fi
log "$name restarted (pid $(cat "$PID_DIR/$name.pid"))"
