#!/usr/bin/env bash
# Regenerates go.mod/go.sum for a Kubernetes release: pins k8s.io/kubernetes, maps every staging
# module it requires at v0.0.0 to the published v0.X.Y, and declares kube-apiserver,
# kube-controller-manager, kubectl and etcd (the etcd version that Kubernetes release requires)
# as Go tool dependencies.
# Usage: tools/kube-testenv/pin-k8s.sh 1.37.2
set -euo pipefail
cd "$(dirname "$0")"
V=${1:?usage: pin-k8s.sh 1.37.2}; V=${V#v}; SV=v0.${V#1.}
export GOFLAGS=-mod=mod
rm -f go.mod go.sum
go mod init github.com/kopf-rs/kopf-rs/tools/kube-testenv >/dev/null 2>&1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
GOMOD=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@v$V" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[ -f "$GOMOD" ] || { echo "pin-k8s: could not download k8s.io/kubernetes@v$V (is the Go module proxy reachable?)" >&2; exit 1; }
for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$GOMOD"); do
  go mod edit -replace="$m=$m@$SV"
done
ETCD=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "$GOMOD")
GOV=$(awk '$1 == "go" {print $2; exit}' "$GOMOD")
go mod edit -go="$GOV"
go mod edit -require="k8s.io/kubernetes@v$V"
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$V"
go get -tool "go.etcd.io/etcd/server/v3@$ETCD"
go get -tool "k8s.io/kubernetes/cmd/kube-controller-manager@v$V"
go get -tool "k8s.io/kubernetes/cmd/kubectl@v$V"
go mod tidy
echo "pinned k8s.io/kubernetes v$V, staging $SV, etcd $ETCD, go $GOV"
