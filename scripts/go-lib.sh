# shellcheck shell=bash
# Helpers for the scripts that build vp2p's Go test peers from a Go module
# of this repository (tests/kube, tests/kubevirt). Sourced, not executed;
# sources scripts/qemu/lib.sh (die, log, version_ge).

# The repository's root.
VP2P_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/qemu/lib.sh
. "$VP2P_ROOT/scripts/qemu/lib.sh"

# require_go MODULE_DIR WHAT: dies unless `go` is on PATH and at least as new
# as MODULE_DIR/go.mod's `go` line (MODULE_DIR relative to the repository's
# root, e.g. tests/kube; WHAT says what needs it). Sets GO_VERSION to the
# version of that `go` (e.g. 1.26.8).
require_go() {
    local module="$1" what="$2" want
    want="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' "$VP2P_ROOT/$module/go.mod")"
    if ! command -v go >/dev/null 2>&1; then
        die "Go $want or later is needed to build $what ($module): install it from https://go.dev/dl/ (or Debian's golang-go when it is $want or later) and put \`go\` on PATH"
    fi
    GO_VERSION="$(go env GOVERSION | sed 's/^go//')"
    if ! version_ge "$GO_VERSION" "$want"; then
        die "Go $GO_VERSION is older than the $want $module/go.mod asks for: install Go $want or later from https://go.dev/dl/"
    fi
}

# go_requires MODULE_DIR MODULE: the version MODULE_DIR/go.mod requires of
# MODULE (e.g. go_requires tests/kube k8s.io/kubernetes -> v1.37.2).
go_requires() {
    sed -n "s|^[[:space:]]*$2 \(v[0-9.]*\)\( // indirect\)\{0,1\}$|\1|p" "$VP2P_ROOT/$1/go.mod"
}

# go_out_dir NAME: the directory a Go test peer is built into,
# $CARGO_TARGET_DIR/NAME (target/NAME when it is not set), made when missing.
go_out_dir() {
    local out="${CARGO_TARGET_DIR:-$VP2P_ROOT/target}/$1"
    mkdir -p "$out" && printf '%s\n' "$out"
}

# go_inputs MODULE_DIR SCRIPT: one line naming what a build of MODULE_DIR by SCRIPT depends on:
# the Go version, and a hash of the module's go.mod, go.sum, its scripts and
# every .go file under it.
go_inputs() {
    local module="$VP2P_ROOT/$1" script="$2"
    # Paths relative to the module, the scripts by content alone: the same
    # inputs hash alike whichever way the script was called.
    printf 'go %s %s\n' "$GO_VERSION" "$(
        { (cd "$module" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 \
            | sort -z | xargs -0 sha256sum)
          cat "$script" "$VP2P_ROOT/scripts/go-lib.sh" | sha256sum; } | sha256sum | cut -d' ' -f1)"
}

# go_build_needed OUT INPUTS BIN...: true unless OUT/inputs reads INPUTS and
# every BIN is in OUT, that is unless the last build was of the same inputs.
go_build_needed() {
    local out="$1" inputs="$2" bin; shift 2
    [ "$(cat "$out/inputs" 2>/dev/null)" = "$inputs" ] || return 0
    for bin in "$@"; do [ -x "$out/$bin" ] || return 0; done
    return 1
}

# go_private_cache: builds into a build cache of their own, deleted on exit.
# The binaries are what is kept (OUT/inputs says of what); the cache of a
# Kubernetes build is gigabytes a machine would carry for nothing.
go_private_cache() {
    GOCACHE="$(mktemp -d "${TMPDIR:-/tmp}/vp2p-gocache.XXXXXX")"
    export GOCACHE
    trap 'chmod -R u+w "$GOCACHE" 2>/dev/null; rm -rf "$GOCACHE"' EXIT
}
