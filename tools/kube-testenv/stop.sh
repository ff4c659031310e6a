#!/usr/bin/env bash
# Stops exactly the processes start.sh started in STATE_DIR (by their recorded PIDs, checked
# against the state directory so a recycled PID is never hit): TERM, then KILL after
# KUBE_TESTENV_STOP_TIMEOUT seconds (default 10). Removes the pid files. Safe to call twice.
# The state directory (certificates, etcd data, logs) is kept for inspection; start.sh wipes it.
#
# Usage: tools/kube-testenv/stop.sh [STATE_DIR]        (default: <repo>/target/kube)
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

DIR=$(kt_state_dir "${1:-}")
[ -d "$DIR" ] || { kt_say "nothing to stop: $DIR does not exist"; exit 0; }
for p in "${KT_PROCS[@]}"; do
  kt_stop "$DIR" "$p"
done
