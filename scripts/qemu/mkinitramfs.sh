#!/usr/bin/env bash
# Build a gzipped newc initramfs for the QEMU end-to-end tests.
#
#   scripts/qemu/mkinitramfs.sh OUT.cpio.gz [--init SCRIPT] [--add SRC:DEST]... [--modules M1,M2]
#
#   --init SCRIPT   shell script run (as root, by busybox sh) once /proc, /sys, /dev and /tmp
#                   are mounted; stored as /vp2p/init.sh. Its exit status is printed as
#                   "==VP2P-EXIT <rc>==" and boot.sh exits with it. Without --init the guest
#                   prints a short PCI summary.
#   --add SRC:DEST  copy file or directory SRC to DEST (absolute path in the guest), e.g.
#                   --add target/debug/p2p-host:/usr/bin/p2p-host; a dynamically linked
#                   program is stripped of debug information and brings its shared
#                   libraries (ldd's list, at the host's paths)
#   --modules LIST  comma-separated kernel modules to include with their dependencies
#                   (e.g. vfio-pci,virtio_pci); load them in the init script with modprobe.
#
# Contents: busybox (static) with a symlink per applet, lspci/setpci + their shared
# libraries + pci.ids, the module indexes of the cached kernel (so lspci -k/-vvv work),
# /init, /usr/bin/vp2p-sysfs-snapshot DEST (copy of the PCI part of /sys), and vp2p-emit:
#   vp2p-emit NAME PATH...   prints tar.gz(PATH...) as base64 between
#                            "==VP2P-BEGIN NAME==" and "==VP2P-END NAME==" on the console;
#                            scripts/qemu/extract.sh LOG NAME OUTDIR unpacks it on the host.
# /init then runs "poweroff -f" (QEMU exits; boot.sh also passes -no-reboot).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { usage_from_header; }
[ $# -ge 1 ] || usage
OUT="$1"; shift
case "$OUT" in -*) usage ;; esac
INIT_SCRIPT=""
ADDS=()
MODULES=""
while [ $# -gt 0 ]; do
    case "$1" in
        --init) [ $# -ge 2 ] || usage; INIT_SCRIPT="$2"; shift 2 ;;
        --add)  [ $# -ge 2 ] || usage; ADDS+=("$2"); shift 2 ;;
        --modules) [ $# -ge 2 ] || usage; MODULES="$MODULES,$2"; shift 2 ;;
        -h|--help) usage ;;
        *) die "unknown argument: $1" ;;
    esac
done
load_paths
[ -x "$VP2P_BUSYBOX" ] || die "busybox missing at $VP2P_BUSYBOX; run setup.sh"
[ -x "$VP2P_PCIUTILS_ROOT/usr/bin/lspci" ] || die "pciutils missing at $VP2P_PCIUTILS_ROOT; run setup.sh"
[ -z "$INIT_SCRIPT" ] || [ -r "$INIT_SCRIPT" ] || die "init script not readable: $INIT_SCRIPT"

ROOT="$(mktemp -d "${TMPDIR:-/tmp}/vp2p-initramfs.XXXXXX")"
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,root,etc,vp2p}

# busybox + one symlink per applet (never over an existing file)
cp "$VP2P_BUSYBOX" "$ROOT/bin/busybox"
"$VP2P_BUSYBOX" --list-full | while read -r p; do
    [ -e "$ROOT/$p" ] || [ -L "$ROOT/$p" ] || { mkdir -p "$ROOT/$(dirname "$p")"; ln -s /bin/busybox "$ROOT/$p"; }
done

# pciutils with its libraries and the loader
cp -a "$VP2P_PCIUTILS_ROOT"/. "$ROOT"/
rm -f "$ROOT/PACKAGES"

# kernel module indexes (+ requested modules and their dependencies)
[ -s "$VP2P_KERNEL_MODULES/modules.dep" ] || die "no modules.dep in $VP2P_KERNEL_MODULES; rerun setup.sh"
MROOT="$ROOT/lib/modules/$VP2P_KERNEL_VERSION"
mkdir -p "$MROOT"
cp "$VP2P_KERNEL_MODULES"/modules.* "$MROOT/"
for m in $(echo "$MODULES" | tr ',' ' '); do
    norm="$(echo "$m" | tr '_' '-')"
    line="$(awk -F: -v m="$norm" '{ n = $1; sub(/.*\//, "", n); sub(/\.ko.*$/, "", n); gsub(/_/, "-", n); if (n == m) { print; exit } }' "$VP2P_KERNEL_MODULES/modules.dep")"
    if [ -z "$line" ]; then
        grep -q -E "/$(echo "$m" | sed 's/[-_]/[-_]/g')\.ko" "$VP2P_KERNEL_MODULES/modules.builtin" \
            && { log "module $m is built into the kernel; nothing to add"; continue; }
        die "module $m not found in $VP2P_KERNEL_MODULES/modules.dep"
    fi
    for f in $(echo "$line" | tr -d ':'); do
        mkdir -p "$MROOT/$(dirname "$f")"; cp "$VP2P_KERNEL_MODULES/$f" "$MROOT/$f"
    done
done

cat >"$ROOT/usr/bin/vp2p-emit" <<'EOF'
#!/bin/sh
# vp2p-emit NAME PATH... : print tar.gz of PATH... base64-encoded between markers.
# Paths are stored as given (use relative paths after cd, or absolute ones: tar strips
# the leading '/'). Kernel console messages are muted meanwhile so they cannot interleave.
[ $# -ge 2 ] || { echo "usage: vp2p-emit NAME PATH..." >&2; exit 2; }
name="$1"; shift
old="$(cut -f1 /proc/sys/kernel/printk 2>/dev/null)"
echo 1 >/proc/sys/kernel/printk 2>/dev/null
tmp="/tmp/.vp2p-emit.$$.tgz"
tar czf "$tmp" "$@" 2>/tmp/.vp2p-emit.err; rc=$?
[ $rc -eq 0 ] || { echo "vp2p-emit: tar failed (rc=$rc): $(head -c 300 /tmp/.vp2p-emit.err)" >&2; }
# busybox tar fails on some sysfs files (e.g. write-only ones) but still writes the rest
echo "==VP2P-BEGIN $name=="
base64 <"$tmp"
echo "==VP2P-END $name=="
rm -f "$tmp"
[ -n "$old" ] && echo "$old" >/proc/sys/kernel/printk 2>/dev/null
exit 0
EOF
chmod 755 "$ROOT/usr/bin/vp2p-emit"

cat >"$ROOT/usr/bin/vp2p-sysfs-snapshot" <<'EOF'
#!/bin/sh
# vp2p-sysfs-snapshot DEST : copy the PCI-relevant part of /sys to DEST/sys, keeping the
# layout and the (relative) symlinks, so host::sysfs can be pointed at DEST as a fixture.
# cp reads to EOF (tar would trust st_size=4096 and fail on sysfs). Unreadable attributes
# (write-only ones like remove/reset) are skipped; resourceN/rom BAR files are dropped.
[ $# -eq 1 ] || { echo "usage: vp2p-sysfs-snapshot DEST" >&2; exit 2; }
d="$1/sys"
mkdir -p "$d/devices/system" "$d/devices/virtual" "$d/bus/pci" "$d/kernel" "$d/class"
for p in /sys/devices/pci*; do cp -a "$p" "$d/devices/" 2>/dev/null; done
cp -a /sys/bus/pci/devices "$d/bus/pci/" 2>/dev/null
cp -a /sys/bus/pci/drivers "$d/bus/pci/" 2>/dev/null
[ -d /sys/kernel/iommu_groups ] && cp -a /sys/kernel/iommu_groups "$d/kernel/" 2>/dev/null
[ -d /sys/devices/virtual/iommu ] && cp -a /sys/devices/virtual/iommu "$d/devices/virtual/" 2>/dev/null
[ -d /sys/class/iommu ] && cp -a /sys/class/iommu "$d/class/" 2>/dev/null
cp -a /sys/devices/system/node "$d/devices/system/" 2>/dev/null
find "$d" \( -name 'resource[0-9]*' -o -name rom \) -type f -exec rm -f {} + 2>/dev/null
exit 0
EOF
chmod 755 "$ROOT/usr/bin/vp2p-sysfs-snapshot"

cat >"$ROOT/init" <<'EOF'
#!/bin/sh
# vp2p test initramfs /init (generated by scripts/qemu/mkinitramfs.sh)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo "==VP2P-INIT uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)=="
if [ -f /vp2p/init.sh ]; then
    sh /vp2p/init.sh
    rc=$?
else
    lspci -tv; lspci -nn; rc=$?
fi
echo "==VP2P-EXIT $rc uptime=$(cut -d' ' -f1 /proc/uptime)=="
sync
poweroff -f
sleep 5
EOF
chmod 755 "$ROOT/init"

[ -z "$INIT_SCRIPT" ] || install -m 755 "$INIT_SCRIPT" "$ROOT/vp2p/init.sh"

# A dynamically linked program added (the workspace's own debug build, as the
# tests add it) loses its debug information, which the guest never reads, and
# brings every shared library ldd names, at the host's path: the host built it
# against those. A static program or a script is copied as it is.
add_libraries() {
    local f=$1 lib
    [ -f "$f" ] && head -c4 "$f" | grep -q $'\x7fELF' || return 0
    ldd "$f" >/dev/null 2>&1 || return 0
    strip --strip-debug "$f"
    for lib in $(ldd "$f" | awk '/=> \// { print $3 } /^\t\// { print $1 }'); do
        [ -e "$ROOT$lib" ] && continue
        mkdir -p "$ROOT$(dirname "$lib")"
        cp -L "$lib" "$ROOT$lib"
    done
}

for a in ${ADDS[@]+"${ADDS[@]}"}; do
    src="${a%%:*}"; dst="${a#*:}"
    [ "$src" != "$a" ] && [ -n "$src" ] && [ -n "$dst" ] || die "--add wants SRC:DEST, got '$a'"
    case "$dst" in /*) ;; *) die "--add DEST must be absolute: '$dst'" ;; esac
    [ -e "$src" ] || die "--add: $src does not exist"
    mkdir -p "$ROOT$(dirname "$dst")"
    if [ -d "$src" ]; then mkdir -p "$ROOT$dst"; cp -a "$src"/. "$ROOT$dst"/; else cp -aL "$src" "$ROOT$dst"; fi
    add_libraries "$ROOT$dst"
done

mkdir -p "$(dirname "$OUT")"
(cd "$ROOT" && find . -mindepth 1 -print0 | LC_ALL=C sort -z \
    | cpio --null --create --format=newc --owner=0:0 --quiet) | gzip -6 -n >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
log "$OUT: $(du -h "$OUT" | cut -f1)"
