#!/usr/bin/env bash
# Started by start.sh when KUBE_TESTENV_OWNER_PID is set: waits until the owner process exits
# (checked by PID and start time, so a recycled PID does not keep it alive), then runs stop.sh
# on the state directory, so an interrupted or killed test run leaves no servers behind.
#
# With "wipe", it then deletes the state directory (used for temporary test environments).
#
# Usage (internal): watchdog.sh OWNER_PID STATE_DIR/ [wipe]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
owner=$1
dir=${2%/}
wipe=${3:-}
# Fields after the command name, which may contain spaces: state is 1st, start time is 20th.
stat_field() { sed 's/.*) //' "/proc/$owner/stat" 2>/dev/null | awk -v n="$1" '{print $n}'; }
started() { stat_field 20; }
state() { stat_field 1; }
birth=$(started)
[ -n "$birth" ] || birth=gone
while [ "$(started)" = "$birth" ] && [ "$(state)" != Z ]; do
  sleep 1
done
echo "$(date -u +%FT%TZ) owner pid $owner exited; stopping the testenv in $dir"
rm -f "$dir/watchdog.pid"
"$here/stop.sh" "$dir"
# Only a state directory (it holds start.sh's marker) is ever deleted.
if [ "$wipe" = wipe ] && [ -e "$dir/.kube-testenv" ]; then
  rm -rf "$dir"
fi
