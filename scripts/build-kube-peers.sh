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
# shellcheck source=scripts/go-lib.sh
. "$(dirname "$0")/go-lib.sh"

require_go tests/kube "the Kubernetes test peers"
out="$(go_out_dir kube-peers)"
log "building kube-peers with Go $GO_VERSION (k8s.io/kubernetes $(go_requires tests/kube k8s.io/kubernetes)) into $out"
cd "$VP2P_ROOT/tests/kube"
# -mod=readonly: go.sum as committed; a missing module is downloaded by the go client.
go build -mod=readonly -o "$out/kube-peers.new" .
mv "$out/kube-peers.new" "$out/kube-peers"
