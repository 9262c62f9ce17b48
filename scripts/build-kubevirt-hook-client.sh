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
# module cache; later builds use the cache and Go's build cache). No C
# compiler and no libvirt: the packages used are pure Go (CGO_ENABLED=0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/qemu/lib.sh"

want="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$root/tests/kubevirt/go.mod")"
if ! command -v go >/dev/null 2>&1; then
    die "Go $want or later is needed to build KubeVirt's hook client (tests/kubevirt): install it from https://go.dev/dl/ (or Debian's golang-go when it is $want or later) and put \`go\` on PATH"
fi
have="$(go env GOVERSION | sed 's/^go//')"
if ! version_ge "$have" "$want"; then
    die "Go $have is older than the $want tests/kubevirt/go.mod asks for: install Go $want or later from https://go.dev/dl/"
fi
out="${CARGO_TARGET_DIR:-$root/target}/kubevirt-hook-client"
mkdir -p "$out"
log "building kubevirt-hook-client and sidecar-shim with Go $have (kubevirt.io/kubevirt $(sed -n "s/^[[:space:]]*kubevirt.io\/kubevirt \(v[0-9.]*\)$/\1/p" "$root/tests/kubevirt/go.mod")) into $out"
cd "$root/tests/kubevirt"
export CGO_ENABLED=0
# -mod=readonly: go.sum as committed; a missing module is downloaded by the go client.
go build -mod=readonly -o "$out/sidecar-shim.new" kubevirt.io/kubevirt/cmd/sidecars
go build -mod=readonly -o "$out/kubevirt-hook-client.new" .
mv "$out/sidecar-shim.new" "$out/sidecar-shim"
mv "$out/kubevirt-hook-client.new" "$out/kubevirt-hook-client"
