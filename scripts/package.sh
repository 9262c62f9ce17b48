#!/usr/bin/env bash
# Build the Debian packages of p2p-host and p2p-guest with cargo-deb:
#
#   bash scripts/package.sh        # prints the two .deb paths (target/debian/)
#
# Each package holds the binary (release build), a man page per subcommand and
# the bash/zsh/fish completions (both made by the binary's hidden `assets`
# command from its clap definition), its systemd units, README and licence;
# the metadata is in [package.metadata.deb] of host/cli/Cargo.toml and
# guest/Cargo.toml. Installs what it needs on a fresh Debian 12 machine with
# cargo: cargo-deb 3.8.0 (cargo install) and dpkg-dev (for the shared-library
# dependencies). `--version` names the commit: VP2P_COMMIT, else HEAD.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/qemu/lib.sh

CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q " $CARGO_DEB_VERSION$"; then
    log "cargo install cargo-deb $CARGO_DEB_VERSION"
    cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi
if ! command -v dpkg-shlibdeps >/dev/null; then
    log "apt-get install dpkg-dev"
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends dpkg-dev >/dev/null
fi

target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
log "cargo build --release (p2p-host, p2p-guest)"
cargo build --release --locked --quiet -p p2p-host-cli -p p2p-guest
mkdir -p "$target/debian"
for bin in p2p-host p2p-guest; do
    assets="$target/release/vp2p-assets/$bin"
    rm -rf "$assets"
    "$target/release/$bin" assets --out "$assets" >/dev/null
    gzip -9n "$assets"/man/*.1
    pkg="$bin"; [ "$bin" = p2p-host ] && pkg=p2p-host-cli   # the .deb is still named p2p-host
    cargo deb --no-build --locked --quiet -p "$pkg" --output "$target/debian/"
done
