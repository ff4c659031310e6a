#!/usr/bin/env bash
# Started by start.sh when KUBE_TESTENV_OWNER_PID is set: waits until the owner process exits
# (checked by PID and start time, so a recycled PID does not keep it alive), then runs stop.sh
# on the state directory, so an interrupted or killed test run leaves no servers behind.
#
# Usage (internal): watchdog.sh OWNER_PID STATE_DIR/
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
owner=$1
dir=${2%/}
started() { awk '{print $22}' "/proc/$owner/stat" 2>/dev/null; }
state() { awk '{print $3}' "/proc/$owner/stat" 2>/dev/null; }
birth=$(started)
[ -n "$birth" ] || birth=gone
while [ "$(started)" = "$birth" ] && [ "$(state)" != Z ]; do
  sleep 1
done
echo "$(date -u +%FT%TZ) owner pid $owner exited; stopping the testenv in $dir"
rm -f "$dir/watchdog.pid"
exec "$here/stop.sh" "$dir"
