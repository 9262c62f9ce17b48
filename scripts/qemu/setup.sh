#!/usr/bin/env bash
# Install and cache everything the QEMU end-to-end tests need, then print the paths.
#
#   scripts/qemu/setup.sh            # idempotent; second run is a no-op (~1 s, no network)
#   VP2P_CACHE=/some/dir scripts/qemu/setup.sh
#
# What it provides (all under ${VP2P_CACHE:-$HOME/.cache/vp2p}):
#   - QEMU 7.2 from bookworm: apt-get install qemu-system-x86 (system-wide, /usr/bin)
#   - QEMU >= 10.1 from trixie-backports, in a debootstrap chroot:  qemu10/root
#     and a wrapper that runs it WITHOUT chroot:                     qemu10/qemu-system-x86_64
#   - a Debian cloud kernel (vmlinuz + config + modules):            kernel/current/
#   - busybox (static):                                              busybox/busybox
#   - lspci/setpci + the shared libraries they need + pci.ids:       pciutils/root/
#   - a Debian 12 root with systemd, man-db, bash-completion:        systemd-root/root/
#   - paths.env: shell variables with all of the above (sourced by boot.sh/mkinitramfs.sh)
#
# Knobs (environment):
#   VP2P_CACHE            cache directory
#   VP2P_DEBIAN_MIRROR    default http://deb.debian.org/debian
#   VP2P_QEMU10_SUITE     default trixie;  VP2P_QEMU10_TARGET default trixie-backports
#   VP2P_QEMU10_MIN       default 10.1 (minimum version accepted for the "10" QEMU)
#   VP2P_KERNEL_PKG       e.g. linux-image-6.12.117+deb12-cloud-amd64 (default: what the
#                         bookworm meta-package linux-image-cloud-amd64 pointed to when the
#                         cache was first filled; it stays pinned in kernel/default)
#   VP2P_FORCE=1          rebuild every cached item
set -euo pipefail
. "$(dirname "$0")/lib.sh"

MIRROR="${VP2P_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
Q10_SUITE="${VP2P_QEMU10_SUITE:-trixie}"
Q10_TARGET="${VP2P_QEMU10_TARGET:-trixie-backports}"
Q10_MIN="${VP2P_QEMU10_MIN:-10.1}"
FORCE="${VP2P_FORCE:-0}"

[ "$(uname -m)" = x86_64 ] || die "only x86_64 hosts are supported"
command -v apt-get >/dev/null || die "apt-get not found: this script expects Debian 12 (bookworm)"
[ ${#SUDO[@]} -eq 0 ] || command -v sudo >/dev/null || die "not root and sudo is not installed"
mkdir -p "$VP2P_CACHE"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/vp2p-setup.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

APT_UPDATED=0
apt_update_once() {
    if [ "$APT_UPDATED" = 0 ]; then
        log "apt-get update"
        "${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
}
is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
apt_install() {
    local missing=() p
    for p in "$@"; do is_installed "$p" || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    apt_update_once
    log "apt-get install ${missing[*]}"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$TMP/apt.log" 2>&1 \
        || { cat "$TMP/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
}
# apt_download DIR PKG...: download .debs (no install) into DIR.
apt_download() {
    local dir="$1"; shift
    mkdir -p "$dir"
    local opt=()
    [ "$(id -u)" -eq 0 ] && opt=(-o APT::Sandbox::User=root)
    if ! (cd "$dir" && apt-get -q "${opt[@]}" download "$@" >"$TMP/dl.log" 2>&1); then
        # Stale package lists on a fresh machine: update once and retry.
        apt_update_once
        (cd "$dir" && apt-get -q "${opt[@]}" download "$@" >"$TMP/dl.log" 2>&1) \
            || { cat "$TMP/dl.log" >&2; die "apt-get download $* failed"; }
    fi
}

# ---------------------------------------------------------------- host packages
# qemu-system-x86 (7.2) pulls seabios, ipxe-qemu, qemu-system-data (kvmvapic, linuxboot_dma).
# debootstrap builds the trixie chroot; cpio+gzip build initramfs images; kmod's depmod
# makes the module indexes the kernel package leaves to its postinst (lspci needs them).
# The libs are what bookworm's lspci links against (we copy them into the initramfs).
apt_install qemu-system-x86 debootstrap cpio gzip ca-certificates kmod \
    libkmod2 libudev1 zlib1g libzstd1 liblzma5 libssl3
QEMU72=/usr/bin/qemu-system-x86_64
QEMU72_VERSION="$(qemu_version "$QEMU72")"
[ -n "$QEMU72_VERSION" ] || die "$QEMU72 --version failed"

# ---------------------------------------------------------------- QEMU >= 10.1 (trixie chroot)
Q10DIR="$VP2P_CACHE/qemu10"
Q10ROOT="$Q10DIR/root"
QEMU10="$Q10DIR/qemu-system-x86_64"

write_qemu10_wrapper() {
    # QEMU finds modules and firmware relative to its executable's directory when
    # <exec dir>/qemu-bundle exists. Run through the chroot's ld.so, the "executable" is
    # ld.so itself, so a qemu-bundle link next to it pointing at the chroot root makes QEMU
    # use the chroot's modules/firmware and never the host's 7.2 ones (loading those aborts:
    # "Only modules from the same build can be loaded", e.g. with -device help).
    "${SUDO[@]}" ln -sfn ../../.. "$Q10ROOT/usr/lib/x86_64-linux-gnu/qemu-bundle"
    cat >"$QEMU10" <<'EOF'
#!/bin/sh
# Runs the trixie(-backports) qemu-system-x86_64 from the chroot next to this file,
# without chroot: its own dynamic loader and libraries; modules and firmware come from
# the chroot via root/usr/lib/x86_64-linux-gnu/qemu-bundle -> root.
# Generated by scripts/qemu/setup.sh.
R="$(dirname "$(readlink -f "$0")")/root"
L="$R/usr/lib/x86_64-linux-gnu"
[ -x "$R/usr/bin/qemu-system-x86_64" ] || { echo "qemu10 wrapper: $R is missing; run scripts/qemu/setup.sh" >&2; exit 127; }
export QEMU_MODULE_DIR="$L/qemu"
exec "$L/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$L:$R/lib/x86_64-linux-gnu" \
    --argv0 qemu-system-x86_64 "$R/usr/bin/qemu-system-x86_64" "$@"
EOF
    chmod 755 "$QEMU10"
}

unmount_under() {  # unmount anything debootstrap may have left mounted under $1
    local d; d="$(readlink -f "$1")"
    awk -v d="$d/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
        "${SUDO[@]}" umount -l "$m" || true
    done
}

qemu10_ok() {
    [ -x "$QEMU10" ] && [ -x "$Q10ROOT/usr/bin/qemu-system-x86_64" ] || return 1
    local v; v="$(qemu_version "$QEMU10")"
    [ -n "$v" ] && version_ge "$v" "$Q10_MIN"
}

if [ "$FORCE" = 1 ] || ! qemu10_ok; then
    mkdir -p "$Q10DIR"
    NEW="$Q10DIR/root.new"
    unmount_under "$NEW" 2>/dev/null || true
    "${SUDO[@]}" rm -rf "$NEW"
    log "debootstrap --variant=minbase $Q10_SUITE (about 30 s)"
    t0=$SECONDS
    "${SUDO[@]}" debootstrap --variant=minbase "$Q10_SUITE" "$NEW" "$MIRROR" >"$TMP/debootstrap.log" 2>&1 \
        || { tail -n 30 "$TMP/debootstrap.log" >&2; unmount_under "$NEW"; die "debootstrap $Q10_SUITE failed (log above)"; }
    unmount_under "$NEW"
    echo "deb $MIRROR $Q10_TARGET main" | "${SUDO[@]}" tee "$NEW/etc/apt/sources.list.d/vp2p-$Q10_TARGET.list" >/dev/null
    "${SUDO[@]}" chroot "$NEW" apt-get update -qq >"$TMP/chroot-update.log" 2>&1 \
        || { cat "$TMP/chroot-update.log" >&2; die "apt-get update in the $Q10_SUITE chroot failed"; }
    CAND="$("${SUDO[@]}" chroot "$NEW" apt-cache policy -t "$Q10_TARGET" qemu-system-x86 | sed -n 's/^ *Candidate: *//p')"
    CANDV="$(echo "$CAND" | sed 's/^[0-9]*://; s/[+~-].*//')"
    if [ -z "$CANDV" ] || [ "$CAND" = "(none)" ] || ! version_ge "$CANDV" "$Q10_MIN"; then
        "${SUDO[@]}" chroot "$NEW" apt-cache policy qemu-system-x86 >&2 || true
        die "$Q10_TARGET offers qemu-system-x86 '$CAND', need >= $Q10_MIN. Try VP2P_QEMU10_SUITE=forky VP2P_QEMU10_TARGET=forky (testing) or sid."
    fi
    log "installing qemu-system-x86 $CAND from $Q10_TARGET into the chroot"
    "${SUDO[@]}" chroot "$NEW" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -t "$Q10_TARGET" qemu-system-x86 >"$TMP/chroot-install.log" 2>&1 \
        || { tail -n 30 "$TMP/chroot-install.log" >&2; unmount_under "$NEW"; die "installing qemu-system-x86 in the chroot failed"; }
    "${SUDO[@]}" chroot "$NEW" apt-get clean >/dev/null 2>&1 || true
    unmount_under "$NEW"
    unmount_under "$Q10ROOT" 2>/dev/null || true
    "${SUDO[@]}" rm -rf "$Q10ROOT"
    "${SUDO[@]}" mv "$NEW" "$Q10ROOT"
    write_qemu10_wrapper
    log "QEMU chroot ready in $((SECONDS - t0)) s"
    qemu10_ok || { "$QEMU10" --version >&2 || true; die "$QEMU10 does not report a version >= $Q10_MIN"; }
else
    write_qemu10_wrapper   # cheap; keeps the wrapper in sync with this script
fi
QEMU10_VERSION="$(qemu_version "$QEMU10")"
"$QEMU10" -device help 2>&1 | grep -q '"vfio-user-pci"' \
    || die "$QEMU10 -device help fails or lacks vfio-user-pci (module/firmware lookup broken?)"
case "$("$QEMU10" -L help 2>&1 | head -n1)" in
    "$Q10ROOT"/*) ;;
    *) die "$QEMU10 does not search its firmware under $Q10ROOT (-L help: $("$QEMU10" -L help 2>&1 | head -n1))" ;;
esac

# ---------------------------------------------------------------- kernel
# kernel/<ver>/{vmlinuz,config,System.map,PACKAGE,lib/modules/<ver>/}; kernel/default is the
# version first resolved from the meta-package (pinned so later Debian updates do not
# change what tests boot); kernel/current is what paths.env points at: VP2P_KERNEL_PKG when
# given, else default.
KDIR="$VP2P_CACHE/kernel"
kernel_ok() { [ -s "$KDIR/$1/vmlinuz" ] && [ -s "$KDIR/$1/lib/modules/$1/modules.dep" ]; }
if [ -n "${VP2P_KERNEL_PKG:-}" ]; then
    KPKG="$VP2P_KERNEL_PKG"
elif [ "$FORCE" != 1 ] && [ -L "$KDIR/default" ] && kernel_ok "$(readlink "$KDIR/default")"; then
    KPKG="linux-image-$(readlink "$KDIR/default")"
else
    KPKG="$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
    if [ -z "$KPKG" ]; then apt_update_once
        KPKG="$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"; fi
    [ -n "$KPKG" ] || die "cannot resolve linux-image-cloud-amd64; set VP2P_KERNEL_PKG"
    SET_DEFAULT=1
fi
KVER="${KPKG#linux-image-}"
if [ "$FORCE" = 1 ] || ! kernel_ok "$KVER"; then
    log "downloading $KPKG"
    apt_download "$TMP/k" "$KPKG"
    dpkg -x "$TMP"/k/"$KPKG"_*.deb "$TMP/k/x"
    rm -rf "$KDIR/$KVER.new"; mkdir -p "$KDIR/$KVER.new/lib"
    cp "$TMP/k/x/boot/vmlinuz-$KVER" "$KDIR/$KVER.new/vmlinuz"
    cp "$TMP/k/x/boot/config-$KVER" "$KDIR/$KVER.new/config"
    cp "$TMP/k/x/boot/System.map-$KVER" "$KDIR/$KVER.new/System.map"
    mv "$TMP/k/x/lib/modules" "$KDIR/$KVER.new/lib/modules"   # lib/modules/$KVER/kernel/...
    # the .deb has no modules.dep*/alias* (its postinst runs depmod): make them here
    depmod -b "$KDIR/$KVER.new" "$KVER" || die "depmod failed for $KVER"
    basename "$TMP"/k/*.deb >"$KDIR/$KVER.new/PACKAGE"
    rm -rf "${KDIR:?}/${KVER:?}"; mv "$KDIR/$KVER.new" "$KDIR/$KVER"
fi
[ "${SET_DEFAULT:-0}" = 1 ] && ln -sfn "$KVER" "$KDIR/default"
ln -sfn "$KVER" "$KDIR/current"
KVER="$(readlink "$KDIR/current")"
KCONFIG="$KDIR/current/config"
for opt in CONFIG_INTEL_IOMMU CONFIG_IRQ_REMAP CONFIG_NUMA CONFIG_ACPI_NUMA CONFIG_PCIEPORTBUS \
           CONFIG_PCI_QUIRKS CONFIG_BLK_DEV_NVME CONFIG_SERIAL_8250_CONSOLE CONFIG_BLK_DEV_INITRD CONFIG_RD_GZIP; do
    grep -q "^$opt=y" "$KCONFIG" || die "kernel $KVER: $opt is not built in (needed by the QEMU tests)"
done

# ---------------------------------------------------------------- busybox + pciutils
BBDIR="$VP2P_CACHE/busybox"
if [ "$FORCE" = 1 ] || ! "$BBDIR/busybox" true 2>/dev/null; then
    log "downloading busybox-static"
    apt_download "$TMP/bb" busybox-static
    dpkg -x "$TMP"/bb/busybox-static_*.deb "$TMP/bb/x"
    mkdir -p "$BBDIR"
    cp "$TMP/bb/x/bin/busybox" "$BBDIR/busybox.new" && mv "$BBDIR/busybox.new" "$BBDIR/busybox"
    basename "$TMP"/bb/*.deb >"$BBDIR/PACKAGE"
fi

PCIDIR="$VP2P_CACHE/pciutils"
if [ "$FORCE" = 1 ] || [ ! -x "$PCIDIR/root/usr/bin/lspci" ]; then
    log "downloading pciutils, libpci3, pci.ids"
    apt_download "$TMP/pci" pciutils libpci3 pci.ids
    for d in "$TMP"/pci/*.deb; do dpkg -x "$d" "$TMP/pci/x"; done
    R="$PCIDIR/root.new"; rm -rf "$R"
    mkdir -p "$R/usr/bin" "$R/usr/share/misc" "$R/lib/x86_64-linux-gnu" "$R/lib64"
    cp "$TMP/pci/x/usr/bin/lspci" "$TMP/pci/x/usr/bin/setpci" "$R/usr/bin/"
    cp "$TMP/pci/x/usr/share/misc/pci.ids" "$R/usr/share/misc/"
    # Resolve the shared libraries: libpci from the extracted package, the rest from the host.
    libs="$(LD_LIBRARY_PATH="$TMP/pci/x/usr/lib/x86_64-linux-gnu" ldd "$R/usr/bin/lspci" "$R/usr/bin/setpci")"
    if echo "$libs" | grep -q 'not found'; then echo "$libs" >&2; die "lspci: unresolved shared libraries"; fi
    echo "$libs" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
        cp -L "$lib" "$R/lib/x86_64-linux-gnu/"
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
    basename -a "$TMP"/pci/*.deb >"$R/PACKAGES"
    rm -rf "$PCIDIR/root"; mv "$R" "$PCIDIR/root"
fi

# ---------------------------------------------------------------- systemd root (bookworm)
# A Debian 12 root with systemd as init, man-db and bash-completion: the packaging tests
# install the .debs into a copy of it with dpkg -i (man -w, completions, systemd-analyze),
# and the boot test packs a copy with p2p-guest installed into an initramfs that boots
# systemd under QEMU. Built once (about a minute), then cached.
SRDIR="$VP2P_CACHE/systemd-root"
SRROOT="$SRDIR/root"
SR_PKGS="systemd-sysv,udev,kmod,man-db,bash-completion"
sysroot_ok() { [ -x "$SRROOT/lib/systemd/systemd" ] && [ -x "$SRROOT/usr/bin/man" ] \
    && [ -f "$SRROOT/usr/share/bash-completion/bash_completion" ] && [ -f "$SRDIR/PACKAGES" ]; }
if [ "$FORCE" = 1 ] || ! sysroot_ok; then
    NEW="$SRDIR/root.new"
    mkdir -p "$SRDIR"
    unmount_under "$NEW" 2>/dev/null || true
    "${SUDO[@]}" rm -rf "$NEW"
    log "debootstrap --variant=minbase --include=$SR_PKGS bookworm (about a minute)"
    t0=$SECONDS
    "${SUDO[@]}" debootstrap --variant=minbase --include="$SR_PKGS" bookworm "$NEW" "$MIRROR" >"$TMP/debootstrap-sr.log" 2>&1 \
        || { tail -n 30 "$TMP/debootstrap-sr.log" >&2; unmount_under "$NEW"; die "debootstrap bookworm (systemd root) failed (log above)"; }
    unmount_under "$NEW"
    "${SUDO[@]}" chroot "$NEW" apt-get clean >/dev/null 2>&1 || true
    "${SUDO[@]}" rm -rf "$NEW"/var/lib/apt/lists/*
    echo vp2p-guest | "${SUDO[@]}" tee "$NEW/etc/hostname" >/dev/null
    unmount_under "$SRROOT" 2>/dev/null || true
    "${SUDO[@]}" rm -rf "$SRROOT"
    "${SUDO[@]}" mv "$NEW" "$SRROOT"
    "${SUDO[@]}" chroot "$SRROOT" dpkg-query -W -f '${Package} ${Version}\n' >"$SRDIR/PACKAGES"
    log "systemd root ready in $((SECONDS - t0)) s ($(grep -c . "$SRDIR/PACKAGES") packages)"
fi
SYSTEMD_VERSION="$(awk '$1 == "systemd" {print $2}' "$SRDIR/PACKAGES")"

# ---------------------------------------------------------------- paths.env
cat >"$VP2P_PATHS_ENV.new" <<EOF
# Generated by scripts/qemu/setup.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)
VP2P_CACHE='$VP2P_CACHE'
VP2P_QEMU72='$QEMU72'
VP2P_QEMU72_VERSION='$QEMU72_VERSION'
VP2P_QEMU10='$QEMU10'
VP2P_QEMU10_VERSION='$QEMU10_VERSION'
VP2P_KERNEL='$KDIR/current/vmlinuz'
VP2P_KERNEL_VERSION='$KVER'
VP2P_KERNEL_CONFIG='$KCONFIG'
VP2P_KERNEL_MODULES='$KDIR/current/lib/modules/$KVER'
VP2P_BUSYBOX='$BBDIR/busybox'
VP2P_PCIUTILS_ROOT='$PCIDIR/root'
VP2P_SYSTEMD_ROOT='$SRROOT'
VP2P_SYSTEMD_VERSION='$SYSTEMD_VERSION'
EOF
mv "$VP2P_PATHS_ENV.new" "$VP2P_PATHS_ENV"
cat "$VP2P_PATHS_ENV"
