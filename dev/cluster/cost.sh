#!/usr/bin/env bash
# Prints what a running cluster's processes cost: each one's resident memory now, and the CPU seconds
# (user + system) they use over SECONDS (default 60) of whatever the cluster is doing meanwhile (idle,
# unless something runs jobs). DEVCLUSTER_ROLE=worker measures the worker cluster.
# Usage: dev/cluster/cost.sh [SECONDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PERIOD="${1:-60}"
TICKS="$(getconf CLK_TCK)"
# cpu_ticks PID: utime + stime of PID (fields 14 and 15 of /proc/PID/stat, after the command name)
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

declare -A pids start
for name in "${PROCESSES[@]}"; do
  pid="$(running_pid "$name")" || die "$name is not running"
  pids[$name]="$pid"
  start[$name]="$(cpu_ticks "$pid")"
done
sleep "$PERIOD"
total_rss=0
total_ticks=0
printf '%-24s %10s %12s\n' process "RSS (MiB)" "CPU s/${PERIOD}s"
for name in "${PROCESSES[@]}"; do
  pid="${pids[$name]}"
  rss_kib="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")"
  ticks=$(($(cpu_ticks "$pid") - start[$name]))
  total_rss=$((total_rss + rss_kib))
  total_ticks=$((total_ticks + ticks))
  printf '%-24s %10d %12s\n' "$name" $((rss_kib / 1024)) "$(awk -v t="$ticks" -v h="$TICKS" 'BEGIN {printf "%.1f", t / h}')"
done
printf '%-24s %10d %12s\n' total $((total_rss / 1024)) "$(awk -v t="$total_ticks" -v h="$TICKS" 'BEGIN {printf "%.1f", t / h}')"
