#!/usr/bin/env bash
# The main job: build p2p-host and print the machine's GPU topology (`p2p-host topo`).
# On a machine without NVIDIA GPUs it says so and shows a bundled tree instead: the
# PCI tree a real Linux kernel built for a two-socket server with PCIe switches and
# an IOMMU (captured under QEMU; its "GPUs" are NVMe controllers, class 0108).
#
#   bash scripts/run.sh [topo options, e.g. --json]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p p2p-host-cli
bin=target/release/p2p-host
has_gpu=no
for d in /sys/bus/pci/devices/*; do
    if [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && [[ "$(cat "$d/class" 2>/dev/null)" == 0x03* ]]; then
        has_gpu=yes
        break
    fi
done
if [ "$has_gpu" = yes ]; then
    exec "$bin" topo "$@"
fi
tree=tests/fixtures/qemu-11.1-two-socket-iommu-on
echo "note: this machine has no NVIDIA GPU; showing the bundled tree $tree" >&2
echo "note: (two sockets, PCIe switches, intel-iommu on; GPUs stand in as NVMe, --gpu-class 0108;" >&2
echo "note:  its e1000e has no RDMA device, so it is a NIC row only with --all-nics)" >&2
exec "$bin" topo --sysfs-root "$tree" --gpu-class 0108 --all-nics "$@"
