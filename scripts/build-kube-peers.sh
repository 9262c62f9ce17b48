#!/usr/bin/env bash
# Builds kube-peers, the Kubernetes peers of vp2p's tests (tests/kube: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and the
# kubelet's plugin clients from k8s.io/kubernetes v1.37), into
# target/kube-peers/kube-peers ($CARGO_TARGET_DIR/kube-peers/ when set).
#
#   bash scripts/build-kube-peers.sh
#
# Needs Go at least as new as tests/kube/go.mod's `go` line and the Go module
# proxy (the ordinary `go` client downloads the modules once into its module
# cache; later builds use the cache and Go's build cache).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/qemu/lib.sh"

want="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$root/tests/kube/go.mod")"
if ! command -v go >/dev/null 2>&1; then
    die "Go $want or later is needed to build the Kubernetes test peers (tests/kube): install it from https://go.dev/dl/ (or Debian's golang-go when it is $want or later) and put \`go\` on PATH"
fi
have="$(go env GOVERSION | sed 's/^go//')"
if ! version_ge "$have" "$want"; then
    die "Go $have is older than the $want tests/kube/go.mod asks for: install Go $want or later from https://go.dev/dl/"
fi
out="${CARGO_TARGET_DIR:-$root/target}/kube-peers"
mkdir -p "$out"
log "building kube-peers with Go $have (k8s.io/kubernetes $(sed -n "s/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p" "$root/tests/kube/go.mod")) into $out"
cd "$root/tests/kube"
# -mod=readonly: go.sum as committed; a missing module is downloaded by the go client.
go build -mod=readonly -o "$out/kube-peers.new" .
mv "$out/kube-peers.new" "$out/kube-peers"
