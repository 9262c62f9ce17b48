# shellcheck shell=bash
# Common helpers for scripts/qemu/*.sh. Sourced, not executed.

VP2P_CACHE="${VP2P_CACHE:-$HOME/.cache/vp2p}"
# File written by setup.sh with the paths of everything it cached.
VP2P_PATHS_ENV="$VP2P_CACHE/paths.env"

die() { echo "error: $(basename "$0"): $*" >&2; exit 1; }
log() { echo "[$(basename "$0")] $*" >&2; }

# shellcheck disable=SC2034  # SUDO is used by the scripts that source this file
if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi

# Load the paths recorded by setup.sh, or explain how to get them.
load_paths() {
    [ -r "$VP2P_PATHS_ENV" ] || die "$VP2P_PATHS_ENV not found; run scripts/qemu/setup.sh first (VP2P_CACHE=$VP2P_CACHE)"
    # shellcheck disable=SC1090
    . "$VP2P_PATHS_ENV"
}

# version_ge A B: true when dotted version A >= B.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# qemu_version BINARY -> "11.1.3"
qemu_version() { "$1" --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9][0-9.]*\).*/\1/p' | head -n1; }

# Print the script's leading comment block (its usage text) and exit 2.
usage_from_header() { awk 'NR > 1 && /^#/ && !/shellcheck/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }
