#!/usr/bin/env bash
# End-to-end check of the QEMU test infrastructure (what NOTES.md was measured with).
#
#   scripts/qemu/selftest.sh [--quick] [OUTDIR]     (default OUTDIR /tmp/vp2p-selftest)
#
# Runs setup.sh (no-op when cached), then boots guest/probe.sh for
#   two-socket    x QEMU {7.2, 10} x IOMMU {on, off}
#   nested-switch x QEMU {7.2, 10} x IOMMU on
# (--quick: only two-socket / QEMU 10 / IOMMU on), and one ~1 MiB vp2p-emit round trip.
# Checks every GPU's sysfs realpath and numa_node against expected/NAME.gpus, that IOMMU
# groups exist exactly when the IOMMU is on, and the ACS Control word of the root ports
# (0x001d with the IOMMU on, 0x0000 off). Leaves logs and the extracted sysfs snapshots in
# OUTDIR (OUTDIR/<topology>-q<qemu>-iommu-<on|off>/{serial.log,sys/}) and a summary.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"

QUICK=0
[ "${1:-}" = "--quick" ] && { QUICK=1; shift; }
OUT="${1:-/tmp/vp2p-selftest}"
mkdir -p "$OUT"
"$HERE/setup.sh" >/dev/null
load_paths

"$HERE/mkinitramfs.sh" "$OUT/probe.cpio.gz" --init "$HERE/guest/probe.sh"
"$HERE/mkinitramfs.sh" "$OUT/emit.cpio.gz" --init "$HERE/guest/emit-test.sh"

FAIL=0
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
fail() { echo "FAIL: $*" | tee -a "$SUMMARY" >&2; FAIL=1; }

run_probe() {  # topology qemu iommu
    local topo="$1" q="$2" io="$3" dir rc=0 t0 t1
    dir="$OUT/$topo-q$q-iommu-$io"
    rm -rf "$dir"; mkdir -p "$dir"
    t0=$(date +%s.%N)
    "$HERE/boot.sh" --qemu "$q" --topology "$topo" --iommu "$io" --initrd "$OUT/probe.cpio.gz" \
        --timeout 240 --log "$dir/serial.log" >/dev/null 2>"$dir/boot.err" || rc=$?
    t1=$(date +%s.%N)
    local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    local log; log="$(tr -d '\r' <"$dir/serial.log")"
    local init_at; init_at="$(echo "$log" | sed -n 's/^==VP2P-INIT uptime=\([0-9.]*\).*/\1/p')"
    [ "$rc" = 0 ] || { fail "$topo q$q iommu=$io: boot.sh exit $rc ($(tail -n1 "$dir/boot.err"))"; return; }
    "$HERE/extract.sh" "$dir/serial.log" sysfs "$dir" 2>>"$dir/boot.err" || fail "$topo q$q iommu=$io: extract failed"
    # GPUs: serial, realpath, numa_node
    local got want
    got="$(echo "$log" | awk '/^GPU / { n = $4; sub(/node=/, "", n); print $2, $3, n }' | sort)"
    want="$(grep -v '^#' "$HERE/expected/$topo.gpus" | sort)"
    [ "$got" = "$want" ] || { fail "$topo q$q iommu=$io: GPU paths differ"; diff <(echo "$want") <(echo "$got") >&2 || true; }
    # sysfs snapshot agrees with the guest's own realpath
    local p
    while read -r _ p _; do
        [ -e "$dir$p/config" ] || fail "$topo q$q iommu=$io: snapshot lacks $p/config"
    done <<<"$want"
    local groups acs
    groups="$(echo "$log" | sed -n 's/^== iommu_groups: \([0-9]*\) groups/\1/p')"
    acs="$(echo "$log" | sed -n 's/^ *setpci ACS ctrl word: //p' | sort | uniq -c | awk '{printf "%sx%s ", $1, $2}')"
    if [ "$io" = on ]; then
        [ "${groups:-0}" -gt 0 ] || fail "$topo q$q iommu=on: no IOMMU groups"
        echo "$acs" | grep -q -E '^[0-9]+x001d $' || fail "$topo q$q iommu=on: ACS ctrl words '$acs' (want all 001d)"
    else
        [ "${groups:-0}" -eq 0 ] || fail "$topo q$q iommu=off: $groups IOMMU groups"
        echo "$acs" | grep -q -E '^[0-9]+x0000 $' || fail "$topo q$q iommu=off: ACS ctrl words '$acs' (want all 0000)"
    fi
    local noacs; noacs="$(echo "$log" | grep -c 'NO ACS capability' || true)"
    printf '%-14s qemu %-4s iommu %-3s  wall %5ss  init at %5ss  groups %-3s ACS-ctrl %s ports-without-ACS %s\n' \
        "$topo" "$q" "$io" "$secs" "${init_at:-?}" "${groups:-0}" "$acs" "$noacs" | tee -a "$SUMMARY"
}

if [ "$QUICK" = 1 ]; then
    run_probe two-socket 10 on
else
    for q in 7.2 10; do for io in on off; do run_probe two-socket "$q" "$io"; done; done
    for q in 7.2 10; do run_probe nested-switch "$q" on; done
fi

# ~1 MiB through the serial console
d="$OUT/emit"; rm -rf "$d"; mkdir -p "$d"
if "$HERE/boot.sh" --qemu 10 --topology two-socket --iommu off --initrd "$OUT/emit.cpio.gz" \
        --timeout 240 --log "$d/serial.log" >/dev/null 2>"$d/boot.err"; then
    want="$(tr -d '\r' <"$d/serial.log" | sed -n 's/^==VP2P-SHA256 \([0-9a-f]*\)==/\1/p')"
    "$HERE/extract.sh" "$d/serial.log" blob "$d/out" 2>>"$d/boot.err" || fail "emit: extract failed"
    got="$(sha256sum "$d/out/random.bin" 2>/dev/null | cut -d' ' -f1)"
    [ -n "$want" ] && [ "$want" = "$got" ] || fail "emit: sha256 mismatch ($want vs $got)"
    echo "emit 1 MiB: $(tr -d '\r' <"$d/serial.log" | grep -o 'emit of 1 MiB took .*'), sha256 ok=$([ "$want" = "$got" ] && echo yes || echo no)" | tee -a "$SUMMARY"
else
    fail "emit: boot failed ($(tail -n1 "$d/boot.err"))"
fi

echo "QEMU 7.2: $VP2P_QEMU72_VERSION, QEMU 10: $VP2P_QEMU10_VERSION, kernel: $VP2P_KERNEL_VERSION" | tee -a "$SUMMARY"
if [ "$FAIL" = 0 ]; then echo "selftest: PASS ($OUT)"; else echo "selftest: FAIL (see $SUMMARY)"; exit 1; fi
