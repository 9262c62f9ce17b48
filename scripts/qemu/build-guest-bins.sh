#!/usr/bin/env bash
# Build static (glibc, crt-static) binaries of the workspace for the QEMU initramfs.
#
#   scripts/qemu/build-guest-bins.sh [--package p2p-host|p2p-guest]... [--print-dir] [--quiet]
#
# Builds the binaries p2p-host (package p2p-host-cli, host/cli) and p2p-guest (package
# p2p-guest, guest/) (--package limits the build to the named binaries, e.g. a test
# that only needs p2p-host) with
#   RUSTFLAGS='-C target-feature=+crt-static' cargo build --release
#       --target x86_64-unknown-linux-gnu --target-dir target/static
# and checks that each one is statically linked (the initramfs has no Rust runtime
# libraries; only the glibc pieces lspci needs). The binaries end up in
#   target/static/x86_64-unknown-linux-gnu/release/{p2p-host,p2p-guest}
# --print-dir prints that directory on stdout when done (for scripts and tests).
# Env: CARGO (default cargo), VP2P_STATIC_TARGET_DIR (default <repo>/target/static).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PRINT_DIR=0 QUIET=() ONLY=()
while [ $# -gt 0 ]; do
    case "$1" in
        --package|-p) [ $# -ge 2 ] || usage_from_header
            case "$2" in p2p-host|p2p-guest) ONLY+=("$2") ;; *) die "--package wants p2p-host or p2p-guest" ;; esac
            shift 2 ;;
        --print-dir) PRINT_DIR=1; shift ;;
        --quiet|-q) QUIET=(-q); shift ;;
        -h|--help) usage_from_header ;;
        *) die "unknown argument: $1" ;;
    esac
done

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
TARGET=x86_64-unknown-linux-gnu
TDIR="${VP2P_STATIC_TARGET_DIR:-$REPO/target/static}"
CARGO="${CARGO:-cargo}"

PKGS=()
BINS=()
[ ${#ONLY[@]} -gt 0 ] || ONLY=(p2p-host p2p-guest)
for b in "${ONLY[@]}"; do
    case "$b" in
        p2p-host) pkg=p2p-host-cli dir=host/cli ;;
        p2p-guest) pkg=p2p-guest dir=guest ;;
    esac
    if [ -f "$REPO/$dir/Cargo.toml" ] && [ -f "$REPO/$dir/src/main.rs" ]; then
        PKGS+=(-p "$pkg"); BINS+=("$b")
    fi
done
[ ${#PKGS[@]} -gt 0 ] || die "neither host/cli/ nor guest/ has a binary to build"

log "building ${BINS[*]} (static, release) into $TDIR"
# Build from the repository root so the workspace's Cargo.lock is used; --bins keeps
# examples and tests out. RUSTFLAGS replaces (not extends) any flags from the
# environment, which is what we want for a reproducible static build.
(cd "$REPO" && RUSTFLAGS='-C target-feature=+crt-static' "$CARGO" build "${QUIET[@]}" --release \
    --target "$TARGET" --target-dir "$TDIR" "${PKGS[@]}" --bins) \
    || die "cargo build failed"

OUT="$TDIR/$TARGET/release"
for b in "${BINS[@]}"; do
    f="$OUT/$b"
    [ -x "$f" ] || die "$f was not built"
    # A static(-pie) binary has no program interpreter and no NEEDED libraries.
    if command -v readelf >/dev/null; then
        if readelf -lW "$f" | grep -q 'Requesting program interpreter' \
            || readelf -dW "$f" | grep -q '(NEEDED)'; then
            die "$f is dynamically linked: $(ldd "$f" 2>&1 | tr '\n' ' ')"
        fi
    elif command -v file >/dev/null; then
        case "$(file -b "$f")" in
            *"static-pie linked"*|*"statically linked"*) ;;
            *) die "$f is not statically linked: $(file -b "$f")" ;;
        esac
    else
        die "neither readelf nor file is installed: cannot check that $f is static"
    fi
    log "$b: static ($(du -h "$f" | cut -f1))"
done
[ "$PRINT_DIR" = 0 ] || echo "$OUT"
