#!/usr/bin/env bash
# Runs a command with the Temporal dev server on a CPU of its own and everything else
# on the others, as where the Temporal service runs apart from the workers, Redis and
# PostgreSQL:
#
#   scripts/pin-temporal.sh COMMAND...      e.g. BENCH=throughput scripts/pin-temporal.sh make bench-e2e
#
# COMMAND and what it starts run on every CPU but the first; each second, every
# `temporal server start-dev` process is moved (all its threads) to the first CPU,
# and the local redis-server and postgres processes (new backends inherit the
# postmaster's) to the others. At the end every process moved is given every CPU
# again. Moving another user's processes needs root; the machine needs 2 CPUs or more.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND..." >&2; exit 2; }
command -v taskset >/dev/null || { echo "error: taskset not found (util-linux)" >&2; exit 1; }
cpus=$(nproc)
[ "$cpus" -ge 2 ] || { echo "error: $cpus CPU: nothing to pin apart" >&2; exit 1; }
rest="1-$((cpus - 1))"

services() { pgrep -x postgres || true; pgrep -x redis-server || true; }
pin() {
  while true; do
    for p in $(pgrep -f 'temporal server start-dev' || true); do taskset -a -p -c 0 "$p" >/dev/null 2>&1 || true; done
    for p in $(services); do taskset -a -p -c "$rest" "$p" >/dev/null 2>&1 || true; done
    sleep 1
  done
}
pin &
pinner=$!
cleanup() {
  kill "$pinner" 2>/dev/null || true
  for p in $(services); do taskset -a -p -c "0-$((cpus - 1))" "$p" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
taskset -c "$rest" "$@"
