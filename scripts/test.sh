#!/usr/bin/env bash
# The test command: sets up everything (scripts/setup.sh) and runs every test of
# the workspace, the QEMU end-to-end tests included. GPU tests are listed as
# ignored here; scripts/gpu.sh runs them on a GPU VM.
#
#   bash scripts/test.sh [extra cargo test arguments]
#
# At the end it prints where the time went (setup, each Go build, the Rust
# build, each test binary), what target/ holds, and fails if a process the
# suite started is still running.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/clock.sh

VP2P_CLOCK="$(mktemp "${TMPDIR:-/tmp}/vp2p-clock.XXXXXX")"
export VP2P_CLOCK
trap 'rm -f "$VP2P_CLOCK"' EXIT
# A clean build gains nothing from incremental state, and it is a third of
# target/debug on disk.
export CARGO_INCREMENTAL=0
target="${CARGO_TARGET_DIR:-$PWD/target}"

# Free disk where target/ and the temporary files go, before and after: the
# suite needs some gigabytes (the summary prints both).
# On a clean clone target/ does not exist yet, and df fails on a missing path.
mkdir -p "$target"
free_disk() { df -h --output=avail "$target" "${TMPDIR:-/tmp}" 2>/dev/null | tail -n +2 | xargs || true; }
disk_before="$(free_disk)"

begin=$(now_ms)
start=$(now_ms)
setup="$(bash scripts/setup.sh)"
eval "$setup"
go=$(awk -F'\t' '/^go build/ { s += $2 } END { print s + 0 }' "$VP2P_CLOCK")
printf 'setup (less the Go builds)\t%s\n' "$(awk -v a="$(seconds_since "$start")" -v g="$go" 'BEGIN { printf "%.1f", a - g }')" >> "$VP2P_CLOCK"

clocked "rust build" cargo test --workspace --locked --no-run "$@"

# Each test binary's time: from its "Running" (or "Doc-tests") line to the next;
# every binary runs, whatever failed before it.
status=0
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | {
    name="" at=0
    while IFS= read -r line; do
        printf '%s\n' "$line"
        case "$line" in
        *"     Running "* | *"   Doc-tests "*)
            [ -z "$name" ] || printf 'test: %s\t%s\n' "$name" "$(seconds_since "$at")" >> "$VP2P_CLOCK"
            name=$(sed -E 's/^ *Running //; s/^ *Doc-tests /doc-tests /; s/^(.*) \(.*deps\/([^/]*)-[0-9a-f]+\)$/\2 (\1)/' <<<"$line")
            at=$(now_ms)
            ;;
        esac
    done
    [ -z "$name" ] || printf 'test: %s\t%s\n' "$name" "$(seconds_since "$at")" >> "$VP2P_CLOCK"
} || status=$?

printf 'total\t%s\n' "$(seconds_since "$begin")" >> "$VP2P_CLOCK"
echo
echo "== where the time went (seconds)"
grep -v -e '^test: ' -e '^total' "$VP2P_CLOCK" | awk -F'\t' '{ printf "%8.1f  %s\n", $2, $1 }'
grep '^test: ' "$VP2P_CLOCK" | sort -t$'\t' -k2 -rn | awk -F'\t' '{ printf "%8.1f  %s\n", $2, $1 }'
awk -F'\t' '/^test: / { s += $2 } END { printf "%8.1f  tests, all binaries\n", s }' "$VP2P_CLOCK"
awk -F'\t' '/^total/ { printf "%8.1f  total\n", $2 }' "$VP2P_CLOCK"

echo
echo "== free disk (target/, then the temporary directory): before $disk_before; after $(free_disk)"
echo "== target/ after the run"
for d in "$target" "$target"/debug "$target"/debug/* "$target"/package "$target"/kube-peers; do
    if [ -e "$d" ]; then du -sh "$d"; fi
done

# Nothing the suite started may outlive it: its binaries and tests live under
# target/, QEMU and the guests' tools under the cache.
left=$(ps -eo pid=,args= | awk -v t="$target/" -v c="${VP2P_CACHE:-$HOME/.cache/vp2p}/" -v me="$$" \
    '$1 != me && (index($0, t) || index($0, c)) && !index($0, "awk -v t=")')
if [ -n "$left" ]; then
    echo
    echo "== FAIL: processes the suite started are still running:"
    echo "$left"
    awk '{ print $1 }' <<<"$left" | xargs -r kill -9 2>/dev/null || true
    [ "$status" -ne 0 ] || status=1
else
    echo
    echo "== no process of the suite left running"
fi
exit "$status"
