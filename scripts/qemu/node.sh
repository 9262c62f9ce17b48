#!/usr/bin/env bash
# A Kubernetes node that is a real one, for the control plane of
# scripts/kube-sandbox.sh: a QEMU guest (TCG) booted from a Debian unstable
# root with systemd, containerd 2.x, runc and the CNI plugins from Debian's
# packages, Kubernetes' own kubelet and kube-proxy (built by
# scripts/build-kube-peers.sh), a vIOMMU, a PCIe switch with two stand-in
# GPUs below it and a third on a root port of its own, and a virtio NIC on
# QEMU's user network. The stand-ins are QEMU's bochs-display (1234:1111,
# class 0380, a display controller as a GPU is, which QEMU's clique property
# requires of a passed-through device; the node's kernel has no driver for it).
#
#   bash scripts/qemu/node.sh root
#       build (once, cached) the node's disk image; print its path
#   bash scripts/qemu/node.sh up CPDIR [--name NODE] [--image OCI.tar]... [--timeout SECS]
#       boot NODE (default vp2p-node) for the control plane in CPDIR, started
#       with CPDIR/node-network (kube-sandbox.sh up DIR --node writes it);
#       wait until the Node is Ready
#   bash scripts/qemu/node.sh down CPDIR [--name NODE] [--discard]
#       power the node off; its disk is kept in CPDIR/nodes/NODE for the next
#       `up`, or with --discard deleted (its console log stays)
#   bash scripts/qemu/node.sh exec CPDIR [--name NODE] -- COMMAND [ARG]...
#       run COMMAND on the node as root (QEMU's guest agent, guest-exec);
#       its output and exit status are the command's
#
# The guest reaches the API server through QEMU's user network (the host's
# loopback is 10.0.2.2 there); nothing listens beyond loopback. The node joins
# with a client certificate the control plane's CA issues (system:node:NODE),
# kube-proxy with one of system:kube-proxy. Images reach containerd with
# `ctr -n k8s.io images import` of the OCI archives given with --image (and
# vp2p's pause image, always): no registry. The guest's console is
# CPDIR/nodes/NODE/console.log; QEMU's guest agent answers on
# CPDIR/nodes/NODE/qga.sock (guest-exec runs a command on the node).
#
# Env: VP2P_NODE_MEMORY (MiB, default 3072), VP2P_NODE_SUITE (default sid: the
# suite with containerd 2.x; Kubernetes 1.36 dropped containerd 1.x).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/lib.sh"

SUITE="${VP2P_NODE_SUITE:-sid}"
MIRROR="${VP2P_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PKGS=systemd-sysv,udev,kmod,dbus,containerd,runc,containernetworking-plugins,iproute2,nftables,conntrack,iptables,ca-certificates,procps,pciutils,qemu-guest-agent
UNITS=(vp2p-seed.service vp2p-images.service containerd.service kubelet.service kube-proxy.service systemd-networkd.service)
target="${CARGO_TARGET_DIR:-$repo/target}"
# VP2P_KUBE_PEERS: another build of kube-peers, whose directory holds the
# kubelet, kube-proxy and pause built with it.
peers="$(dirname "${VP2P_KUBE_PEERS:-$target/kube-peers/kube-peers}")"

load_paths
nodecache="$VP2P_CACHE/node"

unmount_under() {
    local d; d="$(readlink -f "$1")"
    awk -v d="$d/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
}

# The Debian root, once: debootstrap of $SUITE with $PKGS (about a minute).
debian_root() {
    local root="$nodecache/root-$SUITE"
    if [ ! -x "$root/usr/bin/containerd" ] || [ "$(cat "$root.packages-asked" 2>/dev/null)" != "$PKGS" ]; then
        local new="$root.new" tmp
        tmp="$(mktemp)"
        mkdir -p "$nodecache"
        unmount_under "$new" 2>/dev/null || true
        rm -rf "$new"
        log "debootstrap --variant=minbase $SUITE with containerd, runc, CNI plugins, systemd (about a minute)"
        debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$new" "$MIRROR" >"$tmp" 2>&1 \
            || { tail -n 30 "$tmp" >&2; unmount_under "$new"; die "debootstrap $SUITE failed (log above)"; }
        unmount_under "$new"
        chroot "$new" apt-get clean >/dev/null 2>&1 || true
        rm -rf "$new"/var/lib/apt/lists/* "$tmp"
        rm -rf "$root"
        mv "$new" "$root"
        echo "$PKGS" >"$root.packages-asked"
        chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' >"$root.packages"
    fi
    echo "$root"
}

# The node's disk: the Debian root, the kernel's modules, scripts/qemu/node/
# on top, the units enabled. Cached under a key of all of those.
root_image() {
    local root key img stage
    root="$(debian_root)"
    key="$( { echo "$PKGS ${UNITS[*]} $VP2P_KERNEL_VERSION"; cat "$root.packages";
              (cd "$here/node" && find . -type f | sort | xargs sha256sum); } | sha256sum | cut -c1-16)"
    img="$nodecache/root-$key.img"
    if [ ! -s "$img" ]; then
        stage="$nodecache/stage"
        rm -rf "$stage"
        log "building the node's disk image ($img)"
        cp -a "$root" "$stage"
        cp -a "$here/node/." "$stage/"
        mkdir -p "$stage/usr/lib/modules"
        cp -a "$VP2P_KERNEL_MODULES" "$stage/usr/lib/modules/"
        printf '/dev/vda / ext4 rw,relatime 0 1\n' >"$stage/etc/fstab"
        : >"$stage/etc/machine-id"
        # No systemd-resolved: QEMU's user network's DNS in a plain file.
        rm -f "$stage/etc/resolv.conf"; echo "nameserver 10.0.2.3" >"$stage/etc/resolv.conf"
        # The root's own systemctl, which edits unit links offline in a chroot.
        chroot "$stage" systemctl enable "${UNITS[@]}" >/dev/null 2>&1 \
            || die "systemctl enable ${UNITS[*]} in the node's root failed"
        chroot "$stage" systemctl set-default multi-user.target >/dev/null 2>&1
        mkfs.ext4 -q -F -L vp2p-node -E root_owner=0:0 -d "$stage" "$img.new" 4G >/dev/null \
            || die "mkfs.ext4 -d $stage failed"
        rm -rf "$stage"
        mv "$img.new" "$img"
    fi
    echo "$img"
}

# A busybox initramfs that loads virtio-blk (a module in Debian's cloud
# kernel) and switches to the node's root on /dev/vda.
initrd() {
    local out="$nodecache/initrd-$VP2P_KERNEL_VERSION.cpio.gz" d m
    if [ ! -s "$out" ]; then
        d="$(mktemp -d)"
        mkdir -p "$d/bin" "$d/lib" "$d/proc" "$d/sys" "$d/dev" "$d/newroot"
        cp -L "$VP2P_BUSYBOX" "$d/bin/busybox"
        for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk; do
            cp "$(find "$VP2P_KERNEL_MODULES" -name "$m.ko" | head -n1)" "$d/lib/$m.ko"
        done
        cat >"$d/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_blk; do insmod /lib/$m.ko; done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mount -o rw /dev/vda /newroot || { echo "vp2p node initrd: cannot mount /dev/vda"; poweroff -f; }
umount /proc /sys /dev
exec switch_root /newroot /sbin/init
EOF
        chmod 755 "$d/init"
        (cd "$d" && find . | cpio -o -H newc --quiet | gzip -1 >"$out.new")
        rm -rf "$d"
        mv "$out.new" "$out"
    fi
    echo "$out"
}

api_port() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["apiserver_port"])' "$1/state.json"; }

up() {
    local cp="$1" name="$2" timeout="$3"; shift 3
    local images=("$@") nd="$cp/nodes/$name" port img init seed
    [ -f "$cp/node-network" ] || die "$cp/node-network missing: start the control plane with \`bash scripts/kube-sandbox.sh up $cp --node\`"
    [ -s "$cp/state.json" ] || die "$cp/state.json missing: no control plane in $cp"
    for b in kube-peers kubelet kube-proxy pause; do
        [ -x "$peers/$b" ] || die "$peers/$b missing: bash scripts/build-kube-peers.sh builds it"
    done
    if [ -f "$nd/pid" ] && kill -0 "$(cat "$nd/pid")" 2>/dev/null; then
        die "node $name runs already (pid $(cat "$nd/pid")); \`$0 down $cp --name $name\` first"
    fi
    img="$(root_image)"; init="$(initrd)"
    mkdir -p "$nd"
    rm -f "$nd/console.log" "$nd/qga.sock" "$nd/qmp.sock"
    # The node writes to an overlay over the cached image (qemu-img from
    # qemu-utils): a node costs its own writes on disk, not a copy of the root.
    [ -f "$nd/root.qcow2" ] || qemu-img create -q -f qcow2 -b "$img" -F raw "$nd/root.qcow2" \
        || die "qemu-img create of $nd/root.qcow2 over $img failed"

    port="$(api_port "$cp")"
    seed="$nd/seed"
    rm -rf "$seed"; mkdir -p "$seed/bin" "$seed/images"
    cp "$peers/kubelet" "$peers/kube-proxy" "$seed/bin/"
    cp "$cp/pki/ca.crt" "$seed/ca.crt"
    "$peers/kube-peers" node-kubeconfig "$cp" "$name" "$seed/kubelet.kubeconfig" --server "https://10.0.2.2:$port"
    "$peers/kube-peers" proxy-kubeconfig "$cp" "$seed/kube-proxy.kubeconfig" --server "https://10.0.2.2:$port"
    printf 'NODE_NAME=%s\nNODE_LABELS=vp2p.io/gpu-passthrough=true\n' "$name" >"$seed/node.env"
    bash "$repo/scripts/image.sh" --out "$nd/pause-image" --pause "$peers/pause" >/dev/null
    cp "$nd"/pause-image/pause-*.oci.tar "$seed/images/"
    local i
    for i in "${images[@]}"; do cp "$i" "$seed/images/"; done
    rm -f "$nd/seed.img"
    mkfs.ext4 -q -F -L vp2p-seed -d "$seed" "$nd/seed.img" "$(( $(du -sm "$seed" | cut -f1) + 64 ))M" >/dev/null \
        || die "mkfs.ext4 of the seed disk failed"

    local qemu_args=(-machine q35 -accel tcg -cpu max -smp 2 -m "${VP2P_NODE_MEMORY:-3072}"
        -device intel-iommu,intremap=on,caching-mode=on
        -kernel "$VP2P_KERNEL" -initrd "$init"
        -append "console=ttyS0 root=/dev/vda rw intel_iommu=on net.ifnames=0 systemd.show_status=1"
        -drive "file=$nd/root.qcow2,format=qcow2,if=none,id=root" -device virtio-blk-pci,drive=root
        -drive "file=$nd/seed.img,format=raw,if=none,id=seed,readonly=on" -device virtio-blk-pci,drive=seed
        -netdev user,id=net0 -device virtio-net-pci,netdev=net0
        -device virtio-serial-pci
        -chardev "socket,path=$nd/qga.sock,server=on,wait=off,id=qga"
        -device virtserialport,chardev=qga,name=org.qemu.guest_agent.0
        -qmp "unix:$nd/qmp.sock,server=on,wait=off"
        # The stand-in GPUs: two below one switch, one on a root port of its own.
        -device pcie-root-port,id=rp0,bus=pcie.0,chassis=1,slot=1
        -device x3130-upstream,id=sw0,bus=rp0
        -device xio3130-downstream,id=sw0dn0,bus=sw0,chassis=2,slot=0
        -device xio3130-downstream,id=sw0dn1,bus=sw0,chassis=3,slot=1
        -device bochs-display,id=gpu0,bus=sw0dn0
        -device bochs-display,id=gpu1,bus=sw0dn1
        -device pcie-root-port,id=rp1,bus=pcie.0,chassis=4,slot=2
        -device bochs-display,id=gpu2,bus=rp1
        -display none -serial "file:$nd/console.log" -daemonize -pidfile "$nd/pid")
    local kubectl=("$peers/kube-peers" kubectl --kubeconfig "$cp/admin.kubeconfig") t0=$SECONDS ready="" boot
    # A node booted before is still Ready in the API until its lease runs
    # out: wait for this boot's (another boot id) to be Ready.
    local before
    before="$("${kubectl[@]}" get node "$name" -o jsonpath='{.status.nodeInfo.bootID}' 2>/dev/null || true)"
    "$VP2P_QEMU10" "${qemu_args[@]}" || die "QEMU did not start (see above)"
    log "node $name booting (pid $(cat "$nd/pid"), console $nd/console.log); waiting for it to be Ready"

    while [ $((SECONDS - t0)) -lt "$timeout" ]; do
        kill -0 "$(cat "$nd/pid" 2>/dev/null)" 2>/dev/null || { tail -n 30 "$nd/console.log" >&2; die "QEMU of node $name exited"; }
        ready="$("${kubectl[@]}" get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)"
        boot="$("${kubectl[@]}" get node "$name" -o jsonpath='{.status.nodeInfo.bootID}' 2>/dev/null || true)"
        [ "$ready" = True ] && [ "$boot" != "$before" ] && break
        ready=""
        sleep 5
    done
    [ "$ready" = True ] || { tail -n 30 "$nd/console.log" >&2; die "node $name not Ready after ${timeout}s (console: $nd/console.log)"; }
    log "node $name Ready after $((SECONDS - t0)) s"
}

# guest-exec through the guest agent's socket: start, poll, print, exit.
node_exec() {
    local sock="$1/nodes/$2/qga.sock"; shift 2
    [ -S "$sock" ] || die "$sock missing: node not started"
    python3 - "$sock" "$@" <<'PY'
import base64, json, socket, sys, time
sock, argv = sys.argv[1], sys.argv[2:]
s = socket.socket(socket.AF_UNIX)
s.connect(sock)
f = s.makefile("rw")
def call(cmd, **args):
    f.write(json.dumps({"execute": cmd, "arguments": args}) + "\n"); f.flush()
    while True:
        reply = json.loads(f.readline())
        if "error" in reply:
            sys.exit(f"guest agent: {cmd}: {reply['error'].get('desc')}")
        if "return" in reply:
            return reply["return"]
# Discard what an earlier client left unread.
call("guest-sync", id=int(time.time()))
pid = call("guest-exec", path=argv[0], arg=argv[1:], **{"capture-output": True})["pid"]
while True:
    st = call("guest-exec-status", pid=pid)
    if st["exited"]:
        break
    time.sleep(0.2)
sys.stdout.buffer.write(base64.b64decode(st.get("out-data", "")))
sys.stderr.buffer.write(base64.b64decode(st.get("err-data", "")))
sys.exit(st.get("exitcode", 128 + st.get("signal", 0)))
PY
}

down() {
    local cp="$1" name="$2" discard="$3" nd="$1/nodes/$2" pid
    if [ -f "$nd/pid" ]; then
        pid="$(cat "$nd/pid")"
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$nd/pid"
    else
        log "node $name was not started in $cp"
    fi
    [ "$discard" = 0 ] || rm -rf "$nd/root.qcow2" "$nd/seed.img" "$nd/seed" "$nd/pause-image"
}

[ $# -ge 1 ] || usage_from_header
verb="$1"; shift
case "$verb" in
root) [ $# -eq 0 ] || usage_from_header; root_image ;;
up|down|exec)
    [ $# -ge 1 ] || usage_from_header
    cp="$(cd "$1" && pwd)"; shift
    name=vp2p-node timeout=900 images=() discard=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --) shift; break ;;
            --name) [ $# -ge 2 ] || usage_from_header; name="$2"; shift 2 ;;
            --image) [ $# -ge 2 ] || usage_from_header; images+=("$(readlink -f "$2")"); shift 2 ;;
            --timeout) [ $# -ge 2 ] || usage_from_header; timeout="$2"; shift 2 ;;
            --discard) [ "$verb" = down ] || usage_from_header; discard=1; shift ;;
            *) usage_from_header ;;
        esac
    done
    case "$verb" in
        up) up "$cp" "$name" "$timeout" "${images[@]}" ;;
        down) down "$cp" "$name" "$discard" ;;
        exec) [ $# -ge 1 ] || usage_from_header; node_exec "$cp" "$name" "$@" ;;
    esac ;;
*) usage_from_header ;;
esac
