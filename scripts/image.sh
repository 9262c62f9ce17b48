#!/usr/bin/env bash
# Builds vp2p's OCI images without a registry or a container engine: from
# scratch, with umoci (Debian's package), holding p2p-host and the shared
# libraries it links (the host's, as ldd names them), and nothing else.
#
#   bash scripts/image.sh [--binary PATH] [--out DIR] [--pause PATH] [--vm P2P_GUEST]
#
# Writes, in DIR (default target/images), each an OCI image layout in a tar
# (an OCI archive) that `ctr -n k8s.io images import` and `podman load` take,
# tagged with the package version:
#   p2p-host-VERSION.oci.tar       localhost/vp2p/p2p-host:VERSION
#       entry point p2p-host, user 0: the DRA driver, the device plugin and
#       the KubeVirt plugin hook (host/kubernetes/dra/driver.yaml,
#       host/kubevirt/device-plugin.yaml, plugin-hook.yaml)
#   kubevirt-hook-VERSION.oci.tar  localhost/vp2p/kubevirt-hook:VERSION
#       entry point KubeVirt's sidecar-shim (built from kubevirt.io/kubevirt
#       v1.9.0 by scripts/build-kubevirt-hook-client.sh), p2p-host and
#       host/kubevirt/onDefineDomain on its PATH with busybox's sh for it,
#       user 107 (virt-launcher's qemu user): the onDefineDomain hook sidecar
# and prints their paths. With --vm P2P_GUEST, also
#   vm-launcher-VERSION.oci.tar    localhost/vp2p/vm-launcher:VERSION, entry
#       point scripts/qemu/vm-in-pod/vp2p-vm: the VM in a pod as KubeVirt's
#       launcher would run it, with QEMU 11.1 (scripts/qemu/setup.sh's), the
#       cached Debian kernel, an initramfs holding P2P_GUEST, and p2p-host
# With --pause PATH it writes only
#   pause-VERSION.oci.tar          localhost/vp2p/pause:VERSION, PATH
#       (tests/kube/pause, built by scripts/build-kube-peers.sh) as the pod
#       sandboxes' first process on the sandbox node (scripts/qemu/node.sh),
#       which pulls nothing from a registry --binary packs another build of p2p-host (the tests
# pack their debug build); by default the release build is made first.
# host/kubevirt/Containerfile builds the hook sidecar on a registry base instead.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
. "$here/qemu/lib.sh"

binary="" out="" pause="" guest=""
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) [ $# -ge 2 ] || usage_from_header; binary="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || usage_from_header; out="$2"; shift 2 ;;
        --pause) [ $# -ge 2 ] || usage_from_header; pause="$2"; shift 2 ;;
        --vm) [ $# -ge 2 ] || usage_from_header; guest="$(readlink -f "$2")"; shift 2 ;;
        -h|--help) usage_from_header ;;
        *) die "unknown argument: $1" ;;
    esac
done
command -v umoci >/dev/null || die "umoci not found: apt-get install umoci (scripts/setup.sh installs it)"
target="${CARGO_TARGET_DIR:-$repo/target}"
out="${out:-$target/images}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)"
[ -n "$version" ] || die "no version in $repo/Cargo.toml"
if [ -z "$binary" ] && [ -z "$pause" ]; then
    log "cargo build --release -p p2p-host-cli"
    (cd "$repo" && cargo build --release --locked --quiet -p p2p-host-cli)
    binary="$target/release/p2p-host"
fi
[ -n "$pause" ] || [ -x "$binary" ] || die "$binary is not an executable"
shim="$target/kubevirt-hook-client/sidecar-shim"
[ -n "$pause" ] || [ -x "$shim" ] || die "$shim missing: bash scripts/build-kubevirt-hook-client.sh builds it"

work="$(mktemp -d "${TMPDIR:-/tmp}/vp2p-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# A root holding p2p-host (stripped of debug information), every library ldd
# names at the host's path, /tmp, and the users the images run as.
base_root() {
    local root=$1 lib
    mkdir -p "$root/usr/bin" "$root/etc" "$root/tmp"
    chmod 1777 "$root/tmp"
    cp -L "$binary" "$root/usr/bin/p2p-host"
    strip --strip-debug "$root/usr/bin/p2p-host"
    for lib in $(ldd "$root/usr/bin/p2p-host" | awk '/=> \// { print $3 } /^\t\// { print $1 }'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
    printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nqemu:x:107:107:qemu:/:/usr/sbin/nologin\n' >"$root/etc/passwd"
    printf 'root:x:0:\nqemu:x:107:\n' >"$root/etc/group"
}

# image NAME ROOT USER ENTRYPOINT...: the OCI archive of ROOT, tagged VERSION.
image() {
    local name=$1 root=$2 user=$3 layout="$work/$1" tar
    shift 3
    local ref="localhost/vp2p/$name:$version"
    umoci init --layout "$layout"
    umoci new --image "$layout:$version"
    umoci unpack --image "$layout:$version" "$work/$name.bundle" >/dev/null
    cp -a "$root"/. "$work/$name.bundle/rootfs/"
    umoci repack --image "$layout:$version" "$work/$name.bundle"
    local args=(--image "$layout:$version" --config.user "$user" --config.workingdir /
        --config.env PATH=/usr/bin:/bin --clear=config.entrypoint --clear=config.cmd
        --config.label "org.opencontainers.image.title=$name"
        --config.label "org.opencontainers.image.version=$version"
        --config.label "org.opencontainers.image.source=https://example.invalid/vp2p"
        --author "vp2p developers" --architecture amd64 --os linux)
    for e in "$@"; do args+=(--config.entrypoint "$e"); done
    umoci config "${args[@]}"
    umoci gc --layout "$layout"
    # containerd names an imported image from this annotation; podman and
    # others read the OCI ref name (the tag).
    python3 - "$layout/index.json" "$ref" <<'PY'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for m in index["manifests"]:
    m.setdefault("annotations", {})["io.containerd.image.name"] = ref
json.dump(index, open(path, "w"))
PY
    tar="$out/$name-$version.oci.tar"
    tar -C "$layout" -cf "$tar.new" .
    mv "$tar.new" "$tar"
    echo "$tar"
}

if [ -n "$pause" ]; then
    [ -x "$pause" ] || die "$pause is not an executable"
    mkdir -p "$work/pause-root"
    cp -L "$pause" "$work/pause-root/pause"
    image pause "$work/pause-root" 65535 /pause
    exit 0
fi

base_root "$work/root"
image p2p-host "$work/root" 0 /usr/bin/p2p-host

# The hook is a shell wrapper: busybox's sh (static, from the QEMU tests' cache).
load_paths
cp -a "$work/root" "$work/hook-root"
mkdir -p "$work/hook-root/bin"
cp -L "$VP2P_BUSYBOX" "$work/hook-root/bin/busybox"
ln -s busybox "$work/hook-root/bin/sh"
cp -L "$shim" "$work/hook-root/sidecar-shim"
install -m 755 "$repo/host/kubevirt/onDefineDomain" "$work/hook-root/usr/bin/onDefineDomain"
image kubevirt-hook "$work/hook-root" 107 /sidecar-shim

# The VM launcher: QEMU 11.1 run through the loader of its own Debian root,
# with its libraries, modules and firmware; the guest's kernel and initramfs.
if [ -n "$guest" ]; then
    [ -x "$guest" ] || die "$guest is not an executable"
    vm="$work/vm-root" q="$(dirname "$VP2P_QEMU10")/root"
    ql="$q/usr/lib/x86_64-linux-gnu"
    cp -a "$work/root" "$vm"
    mkdir -p "$vm/bin" "$vm/opt/qemu/bin" "$vm/opt/qemu/lib" "$vm/opt/qemu/share" "$vm/vm"
    cp -L "$VP2P_BUSYBOX" "$vm/bin/busybox"
    for a in sh cat sed od tr basename readlink; do ln -s busybox "$vm/bin/$a"; done
    cp -L "$q/usr/bin/qemu-system-x86_64" "$vm/opt/qemu/bin/"
    cp -a "$ql/qemu" "$vm/opt/qemu/lib/qemu"
    for f in "$q/usr/bin/qemu-system-x86_64" "$ql"/qemu/*.so; do
        "$ql/ld-linux-x86-64.so.2" --list --library-path "$ql:$q/lib/x86_64-linux-gnu" "$f" \
            | awk '/=> \// { print $3 }'
    done | sort -u | while read -r lib; do cp -L "$lib" "$vm/opt/qemu/lib/"; done
    cp -L "$ql/ld-linux-x86-64.so.2" "$vm/opt/qemu/lib/"
    cp -rL "$q/usr/share/qemu" "$q/usr/share/seabios" "$vm/opt/qemu/share/"
    cat >"$vm/usr/bin/qemu-system-x86_64" <<'SH'
#!/bin/sh
# QEMU 11.1 through its own loader and libraries (vp2p's vm-launcher image).
export QEMU_MODULE_DIR=/opt/qemu/lib/qemu
exec /opt/qemu/lib/ld-linux-x86-64.so.2 --library-path /opt/qemu/lib \
    --argv0 qemu-system-x86_64 /opt/qemu/bin/qemu-system-x86_64 \
    -L /opt/qemu/share/qemu -L /opt/qemu/share/seabios "$@"
SH
    chmod 755 "$vm/usr/bin/qemu-system-x86_64"
    install -m 755 "$here/qemu/vm-in-pod/vp2p-vm" "$vm/usr/bin/vp2p-vm"
    cp -L "$VP2P_KERNEL" "$vm/vm/vmlinuz"
    bash "$here/qemu/mkinitramfs.sh" "$vm/vm/initrd.cpio.gz" --init "$here/qemu/vm-in-pod/guest-init.sh" \
        --add "$guest:/usr/bin/p2p-guest" >/dev/null
    image vm-launcher "$vm" 0 /usr/bin/vp2p-vm
fi
