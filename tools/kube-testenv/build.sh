#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd and kubectl from the pinned module graph
# (go.mod) into $KUBE_BIN (default: <repo>/target/kube-bin). Skips the build when every binary is
# newer than go.mod, go.sum and this script. Prints how long it took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${KUBE_BIN:-$root/target/kube-bin}
BINS=(kube-apiserver kube-controller-manager etcd kubectl)

die() { echo "kube-testenv build: $*" >&2; exit 1; }
command -v go >/dev/null || die "Go is not installed (need Go >= $(awk '$1=="go"{print $2}' "$here/go.mod")); install it from https://go.dev/dl or your distribution."

up_to_date() {
  for b in "${BINS[@]}"; do
    [ -x "$OUT/$b" ] || return 1
    for src in "$here/go.mod" "$here/go.sum" "$here/build.sh"; do
      [ "$OUT/$b" -nt "$src" ] || return 1
    done
  done
}
if up_to_date && [ "${1:-}" != "--force" ]; then
  echo "kube-testenv build: binaries in $OUT are up to date (use --force to rebuild)"
  exit 0
fi

mkdir -p "$OUT"
cd "$here"
start=$(date +%s)
V=$(go list -m -f '{{.Version}}' k8s.io/kubernetes) || die "cannot resolve k8s.io/kubernetes; is the Go module proxy ($(go env GOPROXY)) reachable?"
MIN=$(echo "$V" | cut -d. -f2)
LDV="-X k8s.io/component-base/version.gitVersion=$V -X k8s.io/component-base/version.gitMajor=1"
LDV="$LDV -X k8s.io/component-base/version.gitMinor=$MIN -X k8s.io/component-base/version.gitTreeState=clean"
LDV="$LDV -X k8s.io/client-go/pkg/version.gitVersion=$V"
export CGO_ENABLED=0
echo "kube-testenv build: building Kubernetes $V into $OUT (cold: ~10-20 min on 2 cores; warm: < 1 min)"
go mod download || die "downloading modules failed; is the Go module proxy ($(go env GOPROXY)) reachable?"
go build -trimpath -ldflags "-s -w $LDV" -o "$OUT/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "-s -w $LDV" -o "$OUT/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
# The client of the docs' shell steps, from the same release (shares most packages with the
# server: ~1 min more on a warm cache).
go build -trimpath -ldflags "-s -w $LDV" -o "$OUT/kubectl" k8s.io/kubernetes/cmd/kubectl
touch "${BINS[@]/#/$OUT/}"
# sed (not head) reads all of the output, so the binary never dies of SIGPIPE under pipefail.
"$OUT/kube-apiserver" --version
"$OUT/kube-controller-manager" --version
"$OUT/etcd" --version | sed -n 1p
"$OUT/kubectl" version --client | sed -n 1p
echo "kube-testenv build: done in $(( $(date +%s) - start ))s"
