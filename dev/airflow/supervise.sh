#!/usr/bin/env bash
# Runs one Airflow process and starts it again whenever it exits, as a Deployment's restartPolicy
# would (like dev/cluster/up.sh supervises mpi-operator). The running process's pid is always in
# .devairflow/pids/NAME.pid; the process leads its own process group, so `kill -9 -PID` kills it
# with its children (the triggerer's trigger runner, the scheduler's executor workers) as a crash
# of its container would, while this loop lives on. SIGTERM stops the process group, then the loop.
# Usage (from up.sh): dev/airflow/supervise.sh NAME COMMAND... (output goes to the caller's log file)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

name="$1"; shift
pidfile="$AF_PID_DIR/$name.pid"
child=""

stop() {
  if [ -n "$child" ]; then
    kill -TERM -- "-$child" 2>/dev/null
    for _ in $(seq 1 150); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$child" 2>/dev/null
  fi
  rm -f "$pidfile"
  exit 0
}
trap stop TERM INT

while :; do
  # setsid: a child of a non-interactive shell is not a group leader, so setsid execs in place and
  # $! is the Airflow process itself, leading a new process group.
  setsid "$@" &
  child=$!
  echo "$child" >"$pidfile"
  wait "$child"
  status=$?
  # `wait` also returns when a trapped signal arrives; the trap then exits.
  log "[devairflow supervisor] $name (pid $child) exited with status $status; restarting in 2 s"
  # Children of a killed process (e.g. a trigger runner) must not outlive it.
  kill -KILL -- "-$child" 2>/dev/null
  sleep 2
done
