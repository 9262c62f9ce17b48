#!/usr/bin/env bash
# Everything vp2p's tests need on a fresh Debian 12 machine with cargo, installed
# or cached; idempotent (a second run does no network work).
#
#   bash scripts/setup.sh
#
# - Debian packages: QEMU 7.2 (contract and boot tests), libvirt's schema validator
#   (virt-xml-validate + xmllint), pciutils (lspci -F in the inject test), debootstrap
#   (for the QEMU 11.1 chroot), cpio, fonts-dejavu-core (DejaVu Sans, the font the pictures
#   name and tests/tests/project/pictures/ renders them with), strace (tests/tests/project/crate_edges.rs
#   watches which commands start an async runtime), procps (scripts/test.sh looks
#   for processes the suite left with ps), umoci (scripts/image.sh builds the OCI images),
#   e2fsprogs (mkfs.ext4 -d makes the sandbox node's disks), qemu-utils (qemu-img: each
#   sandbox node's root is a qcow2 overlay over the cached image);
# - scripts/qemu/setup.sh: QEMU 11.1 from trixie-backports, a Debian cloud kernel,
#   busybox and pciutils for the guest initramfs (under $VP2P_CACHE);
# - the sandbox node's disk (scripts/qemu/node.sh root): Debian unstable with
#   systemd, containerd 2.x, runc and the CNI plugins (under $VP2P_CACHE/node);
# - kubernetes-validate 1.37.0 (PyPI; it bundles Kubernetes' OpenAPI schemas 1.25 to 1.37)
#   in a venv under $VP2P_CACHE/kubernetes-validate, for the DRA manifests' schema check;
# - kube-peers (tests/kube, Go): etcd, kube-apiserver, kube-controller-manager,
#   kube-scheduler, kubectl and the kubelet's plugin clients from k8s.io/kubernetes
#   v1.37, the Kubernetes tests' peers (scripts/build-kube-peers.sh; needs Go 1.26+
#   and the Go module proxy; the modules are cached by the go client);
# - kubevirt-hook-client (tests/kubevirt, Go): virt-launcher's own hook callers
#   from kubevirt.io/kubevirt v1.9.0 (scripts/build-kubevirt-hook-client.sh);
# - NVIDIA's NVRTC (the PyPI wheel nvidia-cuda-nvrtc 13.0.88, the version on the GPU
#   VMs) under $VP2P_CACHE/nvrtc, so the CUDA kernels are compiled in CI without a GPU.
# Prints the shell line that puts NVRTC on the loader path (scripts/test.sh uses it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/qemu/lib.sh"

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
need=()
for p in qemu-system-x86 libvirt-clients libxml2-utils pciutils debootstrap cpio unzip fonts-dejavu-core strace procps umoci e2fsprogs qemu-utils; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    log "apt-get install ${need[*]}"
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

bash "$here/qemu/setup.sh" >/dev/null

kv="$VP2P_CACHE/kubernetes-validate"
if [ ! -x "$kv/bin/kubernetes-validate" ] || ! "$kv/bin/kubernetes-validate" --version 2>/dev/null | grep -qx 1.37.0; then
    log "installing kubernetes-validate 1.37.0 (PyPI) in $kv"
    python3 -m venv "$kv"
    "$kv/bin/pip" install -q "kubernetes-validate==1.37.0" >&2
fi

# With VP2P_CLOCK set (scripts/test.sh), each Go build's seconds go there.
. "$here/clock.sh"
clocked "go build: kube-peers" bash "$here/build-kube-peers.sh"
clocked "go build: kubevirt-hook-client" bash "$here/build-kubevirt-hook-client.sh"
clocked "node disk (Debian unstable)" bash "$here/qemu/node.sh" root >/dev/null

nvrtc="$VP2P_CACHE/nvrtc"
lib="$nvrtc/nvidia/cu13/lib"
if [ ! -e "$lib/libnvrtc.so.13" ]; then
    log "downloading NVRTC 13.0.88 (PyPI wheel nvidia-cuda-nvrtc)"
    tmp="$(mktemp -d)"
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_12_x86_64 \
        --platform manylinux2010_x86_64 --python-version 3.11 -d "$tmp" "nvidia-cuda-nvrtc==13.0.88"
    mkdir -p "$nvrtc"
    unzip -q -o "$tmp"/nvidia_cuda_nvrtc-*.whl 'nvidia/cu13/lib/*' -d "$nvrtc"
    rm -rf "$tmp"
fi
[ -e "$lib/libnvrtc.so.13" ] || die "NVRTC missing under $lib"
echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
