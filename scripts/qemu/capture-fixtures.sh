#!/usr/bin/env bash
# Capture sysfs fixtures from real Linux guests under QEMU (TCG), with the workspace's p2p-host.
#
#   scripts/qemu/capture-fixtures.sh [--combo QEMU:TOPOLOGY:IOMMU]... [--all]
#                                    [--out DIR] [--logs DIR] [--timeout SECS]
#   scripts/qemu/capture-fixtures.sh --guest-script FILE
#
# For each combination (default: the six below) it boots the cached Debian kernel with
# an initramfs holding p2p-host (`cargo build -p p2p-host-cli`, with the shared libraries
# mkinitramfs.sh adds), and the
# guest runs, as root on the live /sys:
#   p2p-host snapshot --out /tmp/cap             -> /tmp/cap/sysfs (PCI attributes + links)
#   p2p-host topo --json --gpu-class "$cls" --all-nics -> /tmp/cap/topo.json
# plus nvme-serials.txt (QEMU id vp2p-gpuN -> PCI address, from /sys/class/nvme) and
# guest.txt (uname -r, /proc/cmdline, p2p-host's stderr). vp2p-emit sends /tmp/cap over
# the serial console, extract.sh unpacks it, and the result replaces
#   DIR/qemu-<7.2|11.1>-<topology>-iommu-<on|off>/{sysfs/,topo.json,nvme-serials.txt,guest.txt,capture.txt}
# (DIR defaults to tests/fixtures). capture.txt records the host side: QEMU version, kernel
# package, the boot.sh command line. QEMU "10" is the trixie-backports build (11.1.x); the
# directory name carries the real major.minor read from the binary.
#
# pcie-costs (boot.sh's topology of ATS and narrowed root ports, virtio-scsi "GPUs" of class
# 0x0100: the guest is told with vp2p_gpu_class=0100 on its command line) is captured only on
# request: --combo 10:pcie-costs:on (and :off); so are boot.sh's 8-GPU server layouts (the DRA
# tests' 8-GPU node and scripts/fleet.sh's shapes): --combo 10:eight-gpu:on,
# --combo 10:switch-pairs:on, --combo 10:root-ports:on.
# Default combinations (the ones that add something; --all takes all eight):
#   7.2:two-socket:on  7.2:two-socket:off  7.2:nested-switch:on
#   10:two-socket:on   10:two-socket:off   10:nested-switch:on
# --logs DIR keeps each serial log as DIR/<fixture>.log (default: a temp dir, removed).
# --guest-script FILE only writes the guest's init script (for mkinitramfs.sh --init) to
# FILE and exits; tests/src/qemu.rs boots the same script in the live test.
# Needs scripts/qemu/setup.sh to have run. Exit status: 0 all captured, 1 a boot or
# extraction failed (the fixture directory of that combination is left untouched).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
COMBOS=() OUT="$REPO/tests/fixtures" LOGS="" TIMEOUT=180 SCRIPT_ONLY=""
DEFAULT_COMBOS=(7.2:two-socket:on 7.2:two-socket:off 7.2:nested-switch:on
    10:two-socket:on 10:two-socket:off 10:nested-switch:on)
while [ $# -gt 0 ]; do
    case "$1" in
        --combo) [ $# -ge 2 ] || usage_from_header; COMBOS+=("$2"); shift 2 ;;
        --all) for q in 7.2 10; do for t in two-socket nested-switch; do for i in on off; do
                   COMBOS+=("$q:$t:$i"); done; done; done; shift ;;
        --out) [ $# -ge 2 ] || usage_from_header; OUT="$2"; shift 2 ;;
        --logs) [ $# -ge 2 ] || usage_from_header; LOGS="$2"; shift 2 ;;
        --timeout) [ $# -ge 2 ] || usage_from_header; TIMEOUT="$2"; shift 2 ;;
        --guest-script) [ $# -ge 2 ] || usage_from_header; SCRIPT_ONLY="$2"; shift 2 ;;
        -h|--help) usage_from_header ;;
        *) die "unknown argument: $1" ;;
    esac
done
# guest_script FILE: the guest side, run as /vp2p/init.sh by the initramfs /init.
guest_script() {
    cat >"$1" <<'EOF'
#!/bin/sh
# Guest side of capture-fixtures.sh (runs as root in the initramfs).
set -u
mkdir -p /tmp/cap
# The nvme driver probes asynchronously: wait (up to 20 s) until every NVMe function is bound,
# so the snapshot's driver links do not depend on timing.
want=$(grep -l '^0x010802$' /sys/bus/pci/devices/*/class | wc -l)
i=0
while [ "$(ls -d /sys/class/nvme/nvme* 2>/dev/null | wc -l)" -lt "$want" ] && [ $i -lt 200 ]; do
    sleep 0.1; i=$((i + 1))
done
for n in /sys/class/nvme/nvme*; do
    [ -e "$n/serial" ] || continue
    echo "$(tr -d ' ' <"$n/serial") $(basename "$(realpath "$n/device")")"
done | sort >/tmp/cap/nvme-serials.txt
# The class code that selects the "GPUs" (vp2p_gpu_class= on the kernel command line;
# pcie-costs uses virtio-scsi-pci functions, class 0x010000), default the NVMe stand-ins'.
cls=$(sed -n 's/.*vp2p_gpu_class=\([0-9a-fA-F]*\).*/\1/p' /proc/cmdline)
[ -n "$cls" ] || cls=0108
rc=0
p2p-host snapshot --out /tmp/cap 2>/tmp/cap/snapshot.err >/tmp/cap/snapshot.out || rc=$?
echo "snapshot rc=$rc: $(cat /tmp/cap/snapshot.out) $(cat /tmp/cap/snapshot.err)"
[ $rc -eq 0 ] || exit 10
p2p-host topo --json --gpu-class "$cls" --all-nics >/tmp/cap/topo.json 2>/tmp/cap/topo.err || rc=$?
echo "topo rc=$rc, $(wc -c </tmp/cap/topo.json) bytes of JSON"
[ $rc -eq 0 ] || { cat /tmp/cap/topo.err; exit 11; }
{
    echo "uname -r: $(uname -r)"
    echo "cmdline: $(cat /proc/cmdline)"
    echo "iommu groups: $(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l)"
    echo "p2p-host snapshot: $(cat /tmp/cap/snapshot.out)"
    echo "p2p-host snapshot stderr: $(cat /tmp/cap/snapshot.err)"
    echo "p2p-host topo stderr: $(cat /tmp/cap/topo.err)"
} >/tmp/cap/guest.txt
rm -f /tmp/cap/snapshot.out /tmp/cap/snapshot.err /tmp/cap/topo.err
p2p-host topo --gpu-class "$cls" --sysfs-root /tmp/cap || true
cd /tmp/cap && vp2p-emit capture sysfs topo.json nvme-serials.txt guest.txt
EOF
}

if [ -n "$SCRIPT_ONLY" ]; then guest_script "$SCRIPT_ONLY"; chmod 755 "$SCRIPT_ONLY"; exit 0; fi
[ ${#COMBOS[@]} -gt 0 ] || COMBOS=("${DEFAULT_COMBOS[@]}")
for c in "${COMBOS[@]}"; do
    [[ "$c" =~ ^(7\.2|10):(two-socket|nested-switch|eight-gpu|switch-pairs|root-ports|pcie-costs):(on|off)$ ]] ||
        die "bad --combo '$c' (want 7.2|10:two-socket|nested-switch|eight-gpu|switch-pairs|root-ports|pcie-costs:on|off)"
done
load_paths

WORK="$(mktemp -d "${TMPDIR:-/tmp}/vp2p-capture.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
[ -n "$LOGS" ] || LOGS="$WORK/logs"
mkdir -p "$LOGS" "$OUT"

guest_script "$WORK/init.sh"
REPO="$(cd "$HERE/../.." && pwd)"
(cd "$REPO" && cargo build -q -p p2p-host-cli) || die "cargo build -p p2p-host-cli failed"
P2P_HOST="${CARGO_TARGET_DIR:-$REPO/target}/debug/p2p-host"

INITRD="$WORK/capture.cpio.gz"
"$HERE/mkinitramfs.sh" "$INITRD" --init "$WORK/init.sh" --add "$P2P_HOST:/usr/bin/p2p-host"

fail=0
for c in "${COMBOS[@]}"; do
    IFS=: read -r q topo iommu <<<"$c"
    if [ "$q" = 7.2 ]; then qbin="$VP2P_QEMU72"; else qbin="$VP2P_QEMU10"; fi
    qver="$(qemu_version "$qbin")"
    [ -n "$qver" ] || die "cannot read the version of $qbin; run scripts/qemu/setup.sh"
    qmm="$(echo "$qver" | cut -d. -f1,2)"
    name="qemu-$qmm-$topo-iommu-$iommu"
    log "== $name (QEMU $qver, kernel $VP2P_KERNEL_VERSION)"
    log_file="$LOGS/$name.log"
    t0=$(date +%s)
    append=()
    [ "$topo" != pcie-costs ] || append=(--append vp2p_gpu_class=0100)
    if ! "$HERE/boot.sh" --qemu "$q" --topology "$topo" --iommu "$iommu" --initrd "$INITRD" "${append[@]}" \
        --timeout "$TIMEOUT" --log "$log_file" >/dev/null; then
        log "FAILED: boot of $name (serial log: $log_file)"; fail=1; continue
    fi
    stage="$WORK/stage-$name"
    rm -rf "$stage"
    if ! "$HERE/extract.sh" "$log_file" capture "$stage"; then
        log "FAILED: extraction for $name"; fail=1; continue
    fi
    if [ ! -d "$stage/sysfs/bus/pci/devices" ] || [ ! -s "$stage/topo.json" ]; then
        log "FAILED: $name: incomplete capture"; fail=1; continue
    fi
    {
        echo "fixture: $name"
        echo "captured: $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/qemu/capture-fixtures.sh"
        echo "qemu: $qver ($qbin, --qemu $q)"
        echo "kernel: $VP2P_KERNEL_VERSION"
        echo "boot: scripts/qemu/boot.sh --qemu $q --topology $topo --iommu $iommu${append[*]:+ ${append[*]}}"
        echo "qemu command line (paths shortened):"
        "$HERE/boot.sh" --qemu "$q" --topology "$topo" --iommu "$iommu" --initrd "$INITRD" "${append[@]}" --print-cmd \
            | sed -e "s|$VP2P_CACHE|\$VP2P_CACHE|g" -e "s|$WORK/||g"
    } >"$stage/capture.txt"
    dest="$OUT/$name"
    rm -rf "$dest"
    mkdir -p "$dest"
    cp -a "$stage"/. "$dest"/
    log "$name: $(find "$dest/sysfs" | wc -l) entries, $(du -sk --apparent-size "$dest" | cut -f1) KiB (apparent), $(( $(date +%s) - t0 )) s"
done
exit $fail
