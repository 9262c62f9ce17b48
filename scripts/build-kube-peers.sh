#!/usr/bin/env bash
# Builds kube-peers, the Kubernetes peers of vp2p's tests (tests/kube: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and the
# kubelet's plugin clients from k8s.io/kubernetes v1.37), and helm's own CLI
# (helm.sh/helm/v3, the version tests/kube/go.mod requires), into
# target/kube-peers/ ($CARGO_TARGET_DIR/kube-peers/ when set).
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
mv "$out/kube-peers.new" "$out/kube-peers"
mv "$out/helm.new" "$out/helm"
