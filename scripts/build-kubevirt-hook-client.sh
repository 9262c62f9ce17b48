#!/usr/bin/env bash
# Builds KubeVirt v1.9.0's own hook clients for vp2p's tests (tests/kubevirt):
# kubevirt-hook-client (virt-launcher's plugin pipeline and sidecar hook
# manager, calling a hook as virt-launcher does) and sidecar-shim (KubeVirt's
# cmd/sidecars, the shim a hook sidecar image runs), into
# target/kubevirt-hook-client/ ($CARGO_TARGET_DIR/kubevirt-hook-client/ when set).
#
#   bash scripts/build-kubevirt-hook-client.sh
#
# Needs Go at least as new as tests/kubevirt/go.mod's `go` line and the Go
# module proxy (the ordinary `go` client downloads the modules once into its
# module cache). A second run with the same inputs does nothing; a build uses
# a build cache of its own, deleted at the end. No C
# compiler and no libvirt: the packages used are pure Go (CGO_ENABLED=0).
set -euo pipefail
# shellcheck source=scripts/go-lib.sh
. "$(dirname "$0")/go-lib.sh"

require_go tests/kubevirt "KubeVirt's hook client"
out="$(go_out_dir kubevirt-hook-client)"
inputs="$(go_inputs tests/kubevirt "$0")"
if ! go_build_needed "$out" "$inputs" sidecar-shim kubevirt-hook-client; then
    log "kubevirt-hook-client in $out is up to date"
    exit 0
fi
go_private_cache
log "building kubevirt-hook-client and sidecar-shim with Go $GO_VERSION (kubevirt.io/kubevirt $(go_requires tests/kubevirt kubevirt.io/kubevirt)) into $out"
cd "$VP2P_ROOT/tests/kubevirt"
export CGO_ENABLED=0
# -mod=readonly: go.sum as committed; a missing module is downloaded by the go client.
go build -mod=readonly -o "$out/sidecar-shim.new" kubevirt.io/kubevirt/cmd/sidecars
go build -mod=readonly -o "$out/kubevirt-hook-client.new" .
mv "$out/sidecar-shim.new" "$out/sidecar-shim"
mv "$out/kubevirt-hook-client.new" "$out/kubevirt-hook-client"
printf '%s\n' "$inputs" >"$out/inputs"
