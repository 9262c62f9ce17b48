#!/usr/bin/env bash
# Builds kube-peers, the Kubernetes peers of vp2p's tests (tests/kube: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and the
# kubelet's plugin clients from k8s.io/kubernetes v1.37), helm's own CLI
# (helm.sh/helm/v3, the version tests/kube/go.mod requires), and what a booted
# node runs: Kubernetes' own kubelet and kube-proxy (their cmd/ packages, as
# Kubernetes builds them) and the pod sandboxes' pause (tests/kube/pause,
# static), into target/kube-peers/ ($CARGO_TARGET_DIR/kube-peers/ when set).
#
#   bash scripts/build-kube-peers.sh
#
# Needs Go at least as new as tests/kube/go.mod's `go` line and the Go module
# proxy (the ordinary `go` client downloads the modules once into its module
# cache). A second run with the same inputs (Go, tests/kube, this script;
# target/kube-peers/inputs) does nothing; a build uses a build cache of its
# own, deleted at the end.
set -euo pipefail
# shellcheck source=scripts/go-lib.sh
. "$(dirname "$0")/go-lib.sh"

require_go tests/kube "the Kubernetes test peers"
out="$(go_out_dir kube-peers)"
inputs="$(go_inputs tests/kube "$0")"
if ! go_build_needed "$out" "$inputs" kube-peers helm kubelet kube-proxy pause; then
    log "kube-peers in $out is up to date"
    exit 0
fi
go_private_cache
log "building kube-peers with Go $GO_VERSION (k8s.io/kubernetes $(go_requires tests/kube k8s.io/kubernetes)) into $out"
cd "$VP2P_ROOT/tests/kube"
# -mod=readonly: go.sum as committed; a missing module is downloaded by the go client.
# The version Kubernetes' own build stamps (hack/lib/version.sh): without it
# the components report v0.0.0-master, which a chart's kubeVersion refuses.
k8s="$(go_requires tests/kube k8s.io/kubernetes)"
major="${k8s#v}"; major="${major%%.*}"
minor="${k8s#v*.}"; minor="${minor%%.*}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
go build -mod=readonly -ldflags "$ldflags" -o "$out/kube-peers.new" .
helm="$(go_requires tests/kube helm.sh/helm/v3)"
go build -mod=readonly -ldflags "-X helm.sh/helm/v3/internal/version.version=$helm" -o "$out/helm.new" helm.sh/helm/v3/cmd/helm
# The node's binaries travel into its disk: no symbol tables.
for cmd in kubelet kube-proxy; do
    go build -mod=readonly -ldflags "-s -w $ldflags" -o "$out/$cmd.new" "k8s.io/kubernetes/cmd/$cmd"
done
CGO_ENABLED=0 go build -mod=readonly -ldflags "-s -w" -o "$out/pause.new" ./pause
for bin in kube-peers helm kubelet kube-proxy pause; do mv "$out/$bin.new" "$out/$bin"; done
printf '%s\n' "$inputs" >"$out/inputs"
