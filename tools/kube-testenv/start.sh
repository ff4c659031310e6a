#!/usr/bin/env bash
# Starts etcd + kube-apiserver (+ kube-controller-manager with only the garbage-collector and
# namespace controllers) on loopback, writes STATE_DIR/kubeconfig, waits until the server answers,
# and prints `export KUBECONFIG=STATE_DIR/kubeconfig` as its only stdout line (messages go to
# stderr), so `eval "$(tools/kube-testenv/start.sh)"` works.
#
# Usage: tools/kube-testenv/start.sh [STATE_DIR]        (default: <repo>/target/kube)
# Env:   KUBE_BIN        binaries (default <repo>/target/kube-bin; build them with build.sh)
#        KUBE_PORT       kube-apiserver HTTPS port (default 16443)
#        ETCD_PORT       etcd client port (default 12379); ETCD_PEER_PORT (default ETCD_PORT+1)
#        KUBE_TESTENV_CONTROLLERS   "gc-ns" (default) runs kube-controller-manager; "none" skips it
#        KUBE_TESTENV_OWNER_PID     if set, a watchdog stops this testenv when that process dies
#        KUBE_TESTENV_WIPE_ON_OWNER_EXIT  if set (with the above), the watchdog also deletes STATE_DIR
#        KUBE_TESTENV_READY_TIMEOUT seconds to wait for readiness (default 120)
#        KUBE_APISERVER_EXTRA_ARGS  extra kube-apiserver flags, whitespace-separated (e.g. audit logging)
#        KUBE_TESTENV_FEATURE_GATES kube-apiserver feature gates, e.g. ShardedListAndWatch=true (the
#                   alpha shardSelector on list and watch, used by sharded operators); default none
#
# Idempotent per state directory: if the processes recorded there run and the server answers, it
# is reused as is. Another state directory with other ports is an independent server.
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

DIR=$(kt_state_dir "${1:-}")
READY_TIMEOUT=${KUBE_TESTENV_READY_TIMEOUT:-120}
t0=$(date +%s.%N)

elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

print_result() {
  kt_say "$1"
  echo "export KUBECONFIG=$DIR/kubeconfig"
}

# ===== reuse a running testenv =====

# Returns 0 if DIR holds a running testenv that answers (reused), 1 if nothing of it runs.
# Dies if only part of it runs.
try_reuse() {
  [ -f "$DIR/env" ] || return 1
  local running=() dead=() p expected=(etcd kube-apiserver)
  grep -qx CONTROLLERS=gc-ns "$DIR/env" && expected+=(kube-controller-manager)
  for p in "${expected[@]}"; do
    if kt_alive "$DIR" "$p"; then running+=("$p"); else dead+=("$p"); fi
  done
  [ ${#running[@]} -gt 0 ] || return 1
  if [ ${#dead[@]} -gt 0 ]; then
    local hint="run tools/kube-testenv/stop.sh $DIR and start again"
    [ "${dead[*]}" = kube-apiserver ] && hint="run tools/kube-testenv/apiserver.sh start $DIR, or $hint"
    kt_die "the testenv in $DIR is only partly running (running: ${running[*]}; not running: ${dead[*]}); $hint"
  fi
  kt_wait_ready "$DIR" "$READY_TIMEOUT"
  # shellcheck disable=SC1091
  . "$DIR/env"
  print_result "reusing the running testenv in $DIR (kube-apiserver pid $(kt_pid "$DIR" kube-apiserver), https://127.0.0.1:$KUBE_PORT)"
  return 0
}

# ===== fresh start =====

prepare_dir() {
  local entry
  for entry in "$DIR"/* "$DIR"/.[!.]*; do
    [ -e "$entry" ] || continue
    case "${entry##*/}" in .lock | "$KT_MARKER") ;; *)
      [ -e "$DIR/$KT_MARKER" ] || kt_die "$DIR is not empty and is not a kube-testenv state directory; refusing to wipe it"
      ;;
    esac
  done
  find "$DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
  touch "$DIR/$KT_MARKER"
  mkdir -p "$DIR/pki" "$DIR/etcd"
  chmod 700 "$DIR/etcd"
}

make_pki() {
  local p=$DIR/pki
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=kube-testenv-ca \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout "$p/apiserver.key" -out "$p/apiserver.csr" 2>/dev/null
  printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc' \
    'extendedKeyUsage=serverAuth' 'keyUsage=digitalSignature,keyEncipherment' >"$p/ext.cnf"
  openssl x509 -req -in "$p/apiserver.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -days 365 -extfile "$p/ext.cnf" -out "$p/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
}

random_token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

# write_kubeconfig FILE USER TOKEN
write_kubeconfig() {
  local ca
  ca=$(base64 -w0 <"$DIR/pki/ca.crt")
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kube-testenv
  cluster:
    server: https://127.0.0.1:$KUBE_PORT
    certificate-authority-data: $ca
users:
- name: $2
  user:
    token: $3
contexts:
- name: kube-testenv
  context:
    cluster: kube-testenv
    user: $2
    namespace: default
current-context: kube-testenv
KC
  chmod 600 "$1"
}

write_config() {
  local admin kcm
  admin=$(random_token)
  kcm=$(random_token)
  umask 077
  printf '%s\n' "$admin,kube-testenv-admin,kube-testenv-admin,system:masters" \
    "$kcm,system:kube-controller-manager,kube-testenv-kcm,system:masters" >"$DIR/tokens.csv"
  cat >"$DIR/env" <<ENV
KUBE_BIN=$KUBE_BIN
KUBE_PORT=$KUBE_PORT
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
ADMIN_TOKEN=$admin
CONTROLLERS=$CONTROLLERS
ENV
  local p=$DIR/pki
  # --endpoint-reconciler-type=none: the default reconciler refuses a loopback advertise address.
  # --shutdown-send-retry-after: stop within ~2 s even with open watches (the HTTP server's
  # shutdown timeout drops from 60 s to 2 s), so apiserver.sh restart is quick.
  printf '%s\n' --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$KUBE_PORT" \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" --token-auth-file="$DIR/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount \
    --cert-dir="$p" --profiling=false \
    --shutdown-send-retry-after=true >"$DIR/apiserver.args"
  if [ -n "${KUBE_TESTENV_FEATURE_GATES:-}" ]; then
    printf '%s\n' "--feature-gates=$KUBE_TESTENV_FEATURE_GATES" >>"$DIR/apiserver.args"
  fi
  # Extra kube-apiserver flags, split at whitespace (bench/run passes its audit-log flags here).
  if [ -n "${KUBE_APISERVER_EXTRA_ARGS:-}" ]; then
    # shellcheck disable=SC2086 # split on purpose
    printf '%s\n' ${KUBE_APISERVER_EXTRA_ARGS} >>"$DIR/apiserver.args"
  fi
  write_kubeconfig "$DIR/kubeconfig" kube-testenv-admin "$admin"
  write_kubeconfig "$DIR/kcm.kubeconfig" system:kube-controller-manager "$kcm"
}

# etcd reads ETCD_* environment variables as flags: hide ours from it.
start_etcd() {
  kt_launch "$DIR" etcd "$DIR/etcd.log" env -u ETCD_PORT -u ETCD_PEER_PORT \
    "$KUBE_BIN/etcd" --name kube-testenv \
    --data-dir "$DIR/etcd" --unsafe-no-fsync --log-level warn \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kube-testenv=http://127.0.0.1:$ETCD_PEER_PORT"
}

# Only the two controllers tests need. No --service-account-private-key-file: in 1.37 it only
# enables legacy secret-based tokens (serviceaccount-token-controller), which is not run here.
start_kcm() {
  kt_launch "$DIR" kube-controller-manager "$DIR/kube-controller-manager.log" \
    "$KUBE_BIN/kube-controller-manager" --kubeconfig="$DIR/kcm.kubeconfig" \
    --controllers=garbage-collector-controller,namespace-controller --leader-elect=false \
    --use-service-account-credentials=false --secure-port=0 --profiling=false
}

# kcm_wait: kube-controller-manager is started once the API server is ready (it gives up if the
# server is not healthy within 10 s, which happens on a loaded machine); wait until its garbage
# collector runs, so tests can rely on it as soon as start.sh returns.
kcm_wait() {
  local deadline=$(($(date +%s) + READY_TIMEOUT))
  until grep -q 'Proceeding to collect garbage' "$DIR/kube-controller-manager.log" 2>/dev/null; do
    if ! kt_alive "$DIR" kube-controller-manager; then
      kt_say "kube-controller-manager exited; last lines of $DIR/kube-controller-manager.log:"
      tail -n 30 "$DIR/kube-controller-manager.log" >&2
      exit 1
    fi
    if (($(date +%s) >= deadline)); then
      kt_say "kube-controller-manager's garbage collector did not start within ${READY_TIMEOUT}s; last lines of $DIR/kube-controller-manager.log:"
      tail -n 30 "$DIR/kube-controller-manager.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}

# On any failure after the first process was launched, stop everything this run started.
STARTING=0
on_exit() {
  if [ "$STARTING" = 1 ]; then
    kt_say "start failed; stopping what was started in $DIR"
    "$KT_HERE/stop.sh" "$DIR" >&2 || true
  fi
}

fresh_start() {
  KUBE_PORT=${KUBE_PORT:-16443}
  ETCD_PORT=${ETCD_PORT:-12379}
  ETCD_PEER_PORT=${ETCD_PEER_PORT:-$((ETCD_PORT + 1))}
  kt_check_port kube-apiserver "$KUBE_PORT"
  kt_check_port "etcd client" "$ETCD_PORT"
  kt_check_port "etcd peer" "$ETCD_PEER_PORT"
  kt_stop "$DIR" watchdog # a stale watchdog must not stop the new testenv later
  prepare_dir
  make_pki
  write_config
  STARTING=1
  trap on_exit EXIT
  start_watchdog # before the servers, so an owner dying during start-up is covered too
  start_etcd
  kt_start_apiserver "$DIR"
  kt_wait_ready "$DIR" "$READY_TIMEOUT"
  kt_say "kube-apiserver ready after $(elapsed)s"
  if [ "$CONTROLLERS" = gc-ns ]; then
    start_kcm
    kcm_wait
    kt_say "kube-controller-manager's garbage collector running after $(elapsed)s"
  fi
  STARTING=0
}

start_watchdog() {
  local owner=${KUBE_TESTENV_OWNER_PID:-}
  [ -n "$owner" ] || return 0
  if kt_alive "$DIR" watchdog; then
    kt_say "a watchdog already guards $DIR (pid $(kt_pid "$DIR" watchdog)); not starting another"
    return 0
  fi
  kt_launch "$DIR" watchdog "$DIR/watchdog.log" "$KT_HERE/watchdog.sh" "$owner" "$DIR/" \
    "${KUBE_TESTENV_WIPE_ON_OWNER_EXIT:+wipe}"
  kt_say "watchdog (pid $(kt_pid "$DIR" watchdog)) stops this testenv when pid $owner exits"
}

main() {
  KUBE_BIN=$(realpath -m "${KUBE_BIN:-$KT_ROOT/target/kube-bin}")
  CONTROLLERS=${KUBE_TESTENV_CONTROLLERS:-gc-ns}
  case "$CONTROLLERS" in gc-ns | none) ;; *) kt_die "KUBE_TESTENV_CONTROLLERS must be gc-ns or none, not '$CONTROLLERS'" ;; esac
  local b
  for b in etcd kube-apiserver kube-controller-manager; do
    [ "$b" = kube-controller-manager ] && [ "$CONTROLLERS" = none ] && continue
    [ -x "$KUBE_BIN/$b" ] || kt_die "$KUBE_BIN/$b is missing; run tools/kube-testenv/build.sh first (or set KUBE_BIN)"
  done
  command -v openssl >/dev/null || kt_die "openssl is not installed; it is needed to make the test certificates"
  command -v curl >/dev/null || kt_die "curl is not installed; it is needed to wait for the API server"
  local owner=${KUBE_TESTENV_OWNER_PID:-}
  if [ -n "$owner" ] && ! { [[ $owner =~ ^[0-9]+$ ]] && [ -d "/proc/$owner" ]; }; then
    kt_die "KUBE_TESTENV_OWNER_PID=$owner is not a running process"
  fi

  mkdir -p "$DIR"
  exec 9>"$DIR/.lock"
  flock -w 300 9 || kt_die "another start.sh has held $DIR/.lock for 300s"
  if try_reuse; then
    start_watchdog
    return 0
  fi
  fresh_start
  local kcm
  kcm=$(kt_pid "$DIR" kube-controller-manager)
  print_result "ready in $(elapsed)s: kube-apiserver pid $(kt_pid "$DIR" kube-apiserver) on https://127.0.0.1:$KUBE_PORT, etcd pid $(kt_pid "$DIR" etcd) on :$ETCD_PORT, kube-controller-manager ${kcm:-not started}"
}
main
