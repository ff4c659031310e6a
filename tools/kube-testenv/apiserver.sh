#!/usr/bin/env bash
# Stops or (re)starts only the kube-apiserver of a running testenv, with the same certificates,
# etcd, port and tokens, so existing kubeconfigs and clients keep working after a restart.
# `start` waits until the server answers again (KUBE_TESTENV_READY_TIMEOUT, default 120 s).
#
# Usage: tools/kube-testenv/apiserver.sh stop|start|restart [STATE_DIR]   (default <repo>/target/kube)
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

usage() { kt_die "usage: apiserver.sh stop|start|restart [STATE_DIR]"; }
[ $# -ge 1 ] || usage
ACTION=$1
DIR=$(kt_state_dir "${2:-}")
[ -f "$DIR/env" ] && [ -f "$DIR/apiserver.args" ] || kt_die "$DIR is not a started testenv (run tools/kube-testenv/start.sh $DIR first)"

do_start() {
  kt_alive "$DIR" etcd || kt_die "etcd of $DIR is not running; restart the whole testenv (stop.sh, then start.sh)"
  if kt_alive "$DIR" kube-apiserver; then
    kt_say "kube-apiserver of $DIR already runs (pid $(kt_pid "$DIR" kube-apiserver))"
  else
    # shellcheck disable=SC1091
    . "$DIR/env"
    kt_check_port kube-apiserver "$KUBE_PORT"
    kt_start_apiserver "$DIR"
  fi
  local t0 t1
  t0=$(date +%s.%N)
  kt_wait_ready "$DIR" "${KUBE_TESTENV_READY_TIMEOUT:-120}"
  t1=$(date +%s.%N)
  kt_say "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "kube-apiserver ready in %.1fs", b - a }') (pid $(kt_pid "$DIR" kube-apiserver))"
}

case "$ACTION" in
  stop) kt_stop "$DIR" kube-apiserver ;;
  start) do_start ;;
  restart) kt_stop "$DIR" kube-apiserver && do_start ;;
  *) usage ;;
esac
