# Shared helpers for start.sh, stop.sh, apiserver.sh and watchdog.sh. Sourced, not run.
# shellcheck shell=bash

KT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KT_ROOT=$(cd "$KT_HERE/../.." && pwd)
# Every process the testenv starts, in stop order (watchdog first so it cannot race stop.sh).
KT_PROCS=(watchdog kube-controller-manager kube-apiserver etcd)
# A state directory holds this marker; start.sh only wipes directories that hold it (or are empty).
KT_MARKER=.kube-testenv

kt_say() { echo "kube-testenv: $*" >&2; }
kt_die() { echo "kube-testenv: error: $*" >&2; exit 1; }

# kt_state_dir [DIR] -> absolute state directory (default <repo>/target/kube).
kt_state_dir() { realpath -m "${1:-$KT_ROOT/target/kube}"; }

# kt_alive DIR NAME -> success if NAME's recorded PID runs and is ours (its command line mentions
# DIR, so a recycled PID is never mistaken for ours). Zombies count as dead.
kt_alive() {
  local dir=$1 name=$2 pid state
  pid=$(cat "$dir/$name.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $1}')
  [ -n "$state" ] || return 1
  [ "$state" != Z ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/" || return 1
}

# kt_pid DIR NAME -> the recorded PID (empty if none).
kt_pid() { cat "$1/$2.pid" 2>/dev/null || true; }

# kt_stop DIR NAME [TIMEOUT_S] -> TERM the recorded process, KILL it after TIMEOUT_S (default 10),
# remove its pid file. Safe to call when it is not running.
kt_stop() {
  local dir=$1 name=$2 timeout=${3:-${KUBE_TESTENV_STOP_TIMEOUT:-10}} pid i
  if kt_alive "$dir" "$name"; then
    pid=$(kt_pid "$dir" "$name")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      kt_alive "$dir" "$name" || break
      sleep 0.1
    done
    if kt_alive "$dir" "$name"; then
      kt_say "$name (pid $pid) did not stop within ${timeout}s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kt_alive "$dir" "$name" || break; sleep 0.1; done
    fi
    kt_say "stopped $name (pid $pid)"
  fi
  rm -f "$dir/$name.pid"
}

# kt_port_holder PORT -> prints what listens on 127.0.0.1:PORT / *:PORT (empty if free).
kt_port_holder() {
  local port=$1 out
  out=$(ss -Hltnp "( sport = :$port )" 2>/dev/null || true)
  [ -n "$out" ] || return 0
  echo "$out" | sed -n 's/.*users:((\(.*\)))/\1/p' | head -1 | grep . || echo "an unknown process"
}

# kt_check_port NAME PORT -> dies with a clear message if PORT is taken.
kt_check_port() {
  local holder
  holder=$(kt_port_holder "$2")
  [ -z "$holder" ] || kt_die "port $2 (for $1) is already in use by $holder; stop it, or choose other ports (KUBE_PORT, ETCD_PORT, ETCD_PEER_PORT) or another state directory"
}

# kt_launch DIR NAME LOG CMD... -> starts CMD in its own session, detached from our stdio and from
# the start lock (fd 9), appending to LOG; records its PID in DIR/NAME.pid.
kt_launch() {
  local dir=$1 name=$2 log=$3 pid state i
  shift 3
  setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$dir/$name.pid"
  # Until the child has exec'd its command, its command line is this shell's, and kt_alive would
  # take the starting process for a dead one (a busy machine makes that window long): wait for
  # the exec, or for the child's end.
  for ((i = 0; i < 100; i++)); do
    kt_alive "$dir" "$name" && return 0
    state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $1}')
    [ -n "$state" ] && [ "$state" != Z ] || return 0
    sleep 0.05
  done
}

# kt_curl DIR PATH -> GET https://127.0.0.1:<port>PATH with the admin token; prints the body.
kt_curl() {
  local dir=$1 path=$2
  # shellcheck disable=SC1091
  . "$dir/env"
  # The token goes in through a file, so it does not show in `ps`.
  [ -f "$dir/auth-header" ] || (umask 077 && echo "Authorization: Bearer $ADMIN_TOKEN" >"$dir/auth-header")
  curl -sf --max-time 5 --cacert "$dir/pki/ca.crt" -H @"$dir/auth-header" \
    "https://127.0.0.1:$KUBE_PORT$path"
}

# kt_answers DIR -> success if the API server is ready and serves the default namespace.
kt_answers() {
  [ "$(kt_curl "$1" /readyz 2>/dev/null)" = ok ] && kt_curl "$1" /api/v1/namespaces/default >/dev/null 2>&1
}

# kt_wait_ready DIR TIMEOUT_S -> waits until kt_answers; dies with the log tail if the server
# exits or is not ready in time.
kt_wait_ready() {
  local dir=$1 timeout=$2 deadline
  deadline=$(($(date +%s) + timeout))
  until kt_answers "$dir"; do
    if ! kt_alive "$dir" kube-apiserver; then
      kt_say "kube-apiserver exited during start-up; last lines of $dir/kube-apiserver.log:"
      tail -n 40 "$dir/kube-apiserver.log" >&2
      exit 1
    fi
    if ! kt_alive "$dir" etcd; then
      kt_say "etcd exited during start-up; last lines of $dir/etcd.log:"
      tail -n 40 "$dir/etcd.log" >&2
      exit 1
    fi
    if (($(date +%s) >= deadline)); then
      kt_say "kube-apiserver was not ready within ${timeout}s; last lines of $dir/kube-apiserver.log:"
      tail -n 40 "$dir/kube-apiserver.log" >&2
      kt_say "last lines of $dir/etcd.log:"
      tail -n 10 "$dir/etcd.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}

# kt_start_apiserver DIR -> launches kube-apiserver with the arguments recorded in DIR/apiserver.args.
kt_start_apiserver() {
  local dir=$1 args=()
  # shellcheck disable=SC1091
  . "$dir/env"
  mapfile -t args <"$dir/apiserver.args"
  echo "=== $(date -u +%FT%TZ) start" >>"$dir/kube-apiserver.log"
  kt_launch "$dir" kube-apiserver "$dir/kube-apiserver.log" "$KUBE_BIN/kube-apiserver" "${args[@]}"
}
