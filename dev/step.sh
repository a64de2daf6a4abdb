#!/usr/bin/env bash
# Wall time of each step of `make test` (issue 26: measure first). `step.sh begin NAME` notes when a
# step starts; `step.sh end NAME` prints its duration and appends "NAME<TAB>seconds" to $STEP_TIMES,
# which .ci/run prints as a table at the end. A step that fails never reaches its `end`: the table
# then lacks it, and make's own error says which step failed. Only a timer: with STEP_TIMES unset it
# still prints each duration.
set -euo pipefail
action=$1 name=$2
dir=${STEP_TIMES_DIR:-${TMPDIR:-/tmp}/disttrain-steps}
case "$action" in
  begin)
    mkdir -p "$dir"
    date +%s >"$dir/$name"
    ;;
  end)
    started=$(cat "$dir/$name" 2>/dev/null || date +%s)
    took=$(($(date +%s) - started))
    echo "==> step $name: ${took}s"
    if [ -n "${STEP_TIMES:-}" ]; then printf '%s\t%s\n' "$name" "$took" >>"$STEP_TIMES"; fi
    ;;
  *)
    echo "usage: $0 begin|end NAME" >&2
    exit 2
    ;;
esac
