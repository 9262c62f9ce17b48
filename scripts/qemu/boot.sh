#!/usr/bin/env bash
# Boot the cached Debian cloud kernel under QEMU/TCG with a fixed PCIe topology.
#
#   scripts/qemu/boot.sh --qemu {7.2|10|PATH} --topology NAME --iommu {on|off} --initrd FILE
#                        [--timeout SECS] [--log FILE] [--append "kernel args"]
#                        [--extra "qemu args"]... [--print-cmd] [--vfio-user-dir DIR]
#                        [--topology-args FILE]
#   scripts/qemu/boot.sh --list-topologies
#
# The serial console (ttyS0) goes to stdout (and to --log FILE when given). Returns when the
# guest powers off (or reboots/panics: -no-reboot, panic=-1) or the timeout passes.
# Exit status:
#   0    guest /init printed "==VP2P-EXIT 0 ...==" and powered off
#   1    guest init script exited non-zero (its rc is printed on stderr)
#   2    usage error / missing files
#   3    QEMU exited but the guest never printed ==VP2P-EXIT== (kernel panic, init crash)
#   4    QEMU failed (bad arguments, missing firmware, ...)
#   124  timeout (default 120 s); QEMU is killed
#   130  boot.sh got SIGTERM/SIGINT/SIGHUP (QEMU is stopped too)
# --extra words are split on whitespace (no quoting); pass --extra several times if needed.
# --vfio-user-dir DIR: where the vfio-user-gpus topology finds its sockets, DIR/gpu0.sock ..
#   DIR/gpu5.sock (p2p-host serve must be listening on them before QEMU starts).
# --topology-args FILE: for topology `args`, the device arguments, one QEMU argument per
#   line (what `p2p-host plan --guest-topology mirror --emit qemu` writes, with vfio-pci
#   devices swapped for stand-ins); the machine, CPUs and NUMA nodes are boot.sh's.
# Env: VP2P_IOMMU_OPTS (default "intremap=on,caching-mode=on", plus device-iotlb=on for pcie-costs;
#      caching-mode is what vfio and
#      vfio-user devices behind a vIOMMU require), VP2P_SMP_THREADS (default: TCG default).
# shellcheck disable=SC2054,SC2015,SC2317  # commas inside QEMU args; A && B || die; trap fn
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { usage_from_header; }

# ----------------------------------------------------------------------------- topologies
# Each topo_NAME function appends QEMU arguments to the array TOPO.
# Common to all: q35, 2 CPUs (one socket each), 2 NUMA nodes of 512 MiB, 1 GiB total.
# "GPUs" are NVMe controllers (class 0x010802, a PCIe endpoint in QEMU 7.2 and 10.x, no
# drive needed, nothing else in the VM has that class). Their serial numbers name them:
# /sys/class/nvme/nvmeN/serial = vp2p-gpuK (the nvme driver is built into the kernel) and
# sysfs .../nvme/nvmeN/device links to the PCI function.
topo_common() {
    TOPO+=(-machine q35 -smp 2,sockets=2,cores=1,threads=1 -m 1G
        -object memory-backend-ram,id=mem0,size=512M -numa node,nodeid=0,memdev=mem0
        -object memory-backend-ram,id=mem1,size=512M -numa node,nodeid=1,memdev=mem1
        -numa cpu,node-id=0,socket-id=0 -numa cpu,node-id=1,socket-id=1
        -netdev user,id=net0,restrict=on)
}
gpu() { TOPO+=(-device "nvme,id=$1,serial=vp2p-$1,bus=$2"); }

# two-socket: pcie.0 + three pxb-pcie host bridges (two on node 0, one on node 1).
#
#   pcie.0 (pci0000:00, no _PXM -> numa_node -1)
#   `- 00:04.0 root port rp00 -> gpu6
#   pxb0  (pci0000:20, numa_node 0)
#   |- root port rp0a -> switch sw0 (x3130-upstream)
#   |                    |- downstream sw0dn0 -> gpu0
#   |                    |- downstream sw0dn1 -> gpu1
#   |                    `- downstream sw0dn2 -> nic0 (e1000e)
#   `- root port rp0b -> gpu2
#   pxb2  (pci0000:40, numa_node 0)
#   `- root port rp2a -> gpu3
#   pxb1  (pci0000:80, numa_node 1)
#   `- root port rp1a -> switch sw1 -> downstream sw1dn0 -> gpu4
#                                   `- downstream sw1dn1 -> gpu5
#
# Expected classification (nvidia-smi topo -m semantics):
#          gpu0  gpu1  gpu2  gpu3  gpu4  gpu5  gpu6  nic0
#   gpu0    X    PIX   PHB   NODE  SYS   SYS   (*)   PIX
#   gpu1   PIX    X    PHB   NODE  SYS   SYS   (*)   PIX
#   gpu2   PHB   PHB    X    NODE  SYS   SYS   (*)   PHB
#   gpu3   NODE  NODE  NODE   X    SYS   SYS   (*)   NODE
#   gpu4   SYS   SYS   SYS   SYS    X    PIX   (*)   SYS
#   gpu5   SYS   SYS   SYS   SYS   PIX    X    (*)   SYS
# (*) gpu6 sits on pcie.0 whose numa_node is -1 (QEMU gives the main host bridge no _PXM):
#     NODE vs node-0 GPUs only if the analyser treats -1 as node 0, else SYS (or unknown).
topo_two_socket() {
    topo_common
    TOPO+=(-device pcie-root-port,id=rp00,bus=pcie.0,addr=0x4,chassis=1,slot=0)
    gpu gpu6 rp00
    TOPO+=(-device pxb-pcie,id=pxb0,bus=pcie.0,addr=0x10,bus_nr=0x20,numa_node=0
        -device pcie-root-port,id=rp0a,bus=pxb0,addr=0x0,chassis=2,slot=0
        -device x3130-upstream,id=sw0,bus=rp0a
        -device xio3130-downstream,id=sw0dn0,bus=sw0,addr=0x0,chassis=3,slot=0
        -device xio3130-downstream,id=sw0dn1,bus=sw0,addr=0x1,chassis=3,slot=1
        -device xio3130-downstream,id=sw0dn2,bus=sw0,addr=0x2,chassis=3,slot=2)
    gpu gpu0 sw0dn0
    gpu gpu1 sw0dn1
    TOPO+=(-device e1000e,id=nic0,bus=sw0dn2,netdev=net0,romfile=
        -device pcie-root-port,id=rp0b,bus=pxb0,addr=0x1,chassis=4,slot=0)
    gpu gpu2 rp0b
    TOPO+=(-device pxb-pcie,id=pxb2,bus=pcie.0,addr=0x11,bus_nr=0x40,numa_node=0
        -device pcie-root-port,id=rp2a,bus=pxb2,addr=0x0,chassis=5,slot=0)
    gpu gpu3 rp2a
    TOPO+=(-device pxb-pcie,id=pxb1,bus=pcie.0,addr=0x12,bus_nr=0x80,numa_node=1
        -device pcie-root-port,id=rp1a,bus=pxb1,addr=0x0,chassis=6,slot=0
        -device x3130-upstream,id=sw1,bus=rp1a
        -device xio3130-downstream,id=sw1dn0,bus=sw1,addr=0x0,chassis=7,slot=0
        -device xio3130-downstream,id=sw1dn1,bus=sw1,addr=0x1,chassis=7,slot=1)
    gpu gpu4 sw1dn0
    gpu gpu5 sw1dn1
}

# nested-switch: a switch below a downstream port of another switch (PXB pairs).
#
#   pxb0 (pci0000:20, numa_node 0)
#   |- root port rp0a -> switch swA -> downstream swAdn0 -> switch swB -> swBdn0 -> gpu0
#   |                               |                                 `- swBdn1 -> gpu1
#   |                               `- downstream swAdn1 -> gpu2
#   `- root port rp0b -> gpu3
#   pxb1 (pci0000:80, numa_node 1)
#   `- root port rp1a -> gpu4
#
#          gpu0  gpu1  gpu2  gpu3  gpu4
#   gpu0    X    PIX   PXB   PHB   SYS
#   gpu1   PIX    X    PXB   PHB   SYS
#   gpu2   PXB   PXB    X    PHB   SYS
#   gpu3   PHB   PHB   PHB    X    SYS
#   gpu4   SYS   SYS   SYS   SYS    X
topo_nested_switch() {
    topo_common
    TOPO+=(-device pxb-pcie,id=pxb0,bus=pcie.0,addr=0x10,bus_nr=0x20,numa_node=0
        -device pcie-root-port,id=rp0a,bus=pxb0,addr=0x0,chassis=2,slot=0
        -device x3130-upstream,id=swA,bus=rp0a
        -device xio3130-downstream,id=swAdn0,bus=swA,addr=0x0,chassis=3,slot=0
        -device xio3130-downstream,id=swAdn1,bus=swA,addr=0x1,chassis=3,slot=1
        -device x3130-upstream,id=swB,bus=swAdn0
        -device xio3130-downstream,id=swBdn0,bus=swB,addr=0x0,chassis=4,slot=0
        -device xio3130-downstream,id=swBdn1,bus=swB,addr=0x1,chassis=4,slot=1)
    gpu gpu0 swBdn0
    gpu gpu1 swBdn1
    gpu gpu2 swAdn1
    TOPO+=(-device pcie-root-port,id=rp0b,bus=pxb0,addr=0x1,chassis=5,slot=0)
    gpu gpu3 rp0b
    TOPO+=(-device pxb-pcie,id=pxb1,bus=pcie.0,addr=0x12,bus_nr=0x80,numa_node=1
        -device pcie-root-port,id=rp1a,bus=pxb1,addr=0x0,chassis=6,slot=0)
    gpu gpu4 rp1a
}

# vfio-user-gpus: six GPUs served over vfio-user (p2p-host serve, one socket each, in
# --vfio-user-dir DIR), placed like two-socket. QEMU 10.1 or later (--qemu 10). Guest RAM is
# memory-backend-memfd with share=on (the server is told about it with DMA_MAP and gets the
# memfd), and there is no e1000e (-nodefaults leaves no NIC).
#
#   pxb0  (pci0000:20, numa_node 0)
#   |- root port rp0a -> switch sw0 (x3130) -> downstream sw0dn0 -> gpu0  23:00.0
#   |                                       `- downstream sw0dn1 -> gpu1  24:00.0
#   `- root port rp0b -> gpu2                                              25:00.0
#   pxb2  (pci0000:40, numa_node 0)
#   `- root port rp2a -> gpu3                                              41:00.0
#   pxb1  (pci0000:80, numa_node 1)
#   `- root port rp1a -> switch sw1 -> downstream sw1dn0 -> gpu4           83:00.0
#                                   `- downstream sw1dn1 -> gpu5           84:00.0
#
#          gpu0  gpu1  gpu2  gpu3  gpu4  gpu5
#   gpu0    X    PIX   PHB   NODE  SYS   SYS
#   gpu1   PIX    X    PHB   NODE  SYS   SYS
#   gpu2   PHB   PHB    X    NODE  SYS   SYS
#   gpu3   NODE  NODE  NODE   X    SYS   SYS
#   gpu4   SYS   SYS   SYS   SYS    X    PIX
#   gpu5   SYS   SYS   SYS   SYS   PIX    X
topo_vfio_user_gpus() {
    [ -n "$VFIO_USER_DIR" ] || { echo "error: topology vfio-user-gpus needs --vfio-user-dir DIR" >&2; exit 2; }
    TOPO+=(-machine q35 -smp 2,sockets=2,cores=1,threads=1 -m 1G
        -object memory-backend-memfd,id=mem0,size=512M,share=on -numa node,nodeid=0,memdev=mem0
        -object memory-backend-memfd,id=mem1,size=512M,share=on -numa node,nodeid=1,memdev=mem1
        -numa cpu,node-id=0,socket-id=0 -numa cpu,node-id=1,socket-id=1
        -device pxb-pcie,id=pxb0,bus=pcie.0,addr=0x10,bus_nr=0x20,numa_node=0
        -device pcie-root-port,id=rp0a,bus=pxb0,addr=0x0,chassis=2,slot=0
        -device x3130-upstream,id=sw0,bus=rp0a
        -device xio3130-downstream,id=sw0dn0,bus=sw0,addr=0x0,chassis=3,slot=0
        -device xio3130-downstream,id=sw0dn1,bus=sw0,addr=0x1,chassis=3,slot=1
        -device pcie-root-port,id=rp0b,bus=pxb0,addr=0x1,chassis=4,slot=0
        -device pxb-pcie,id=pxb2,bus=pcie.0,addr=0x11,bus_nr=0x40,numa_node=0
        -device pcie-root-port,id=rp2a,bus=pxb2,addr=0x0,chassis=5,slot=0
        -device pxb-pcie,id=pxb1,bus=pcie.0,addr=0x12,bus_nr=0x80,numa_node=1
        -device pcie-root-port,id=rp1a,bus=pxb1,addr=0x0,chassis=6,slot=0
        -device x3130-upstream,id=sw1,bus=rp1a
        -device xio3130-downstream,id=sw1dn0,bus=sw1,addr=0x0,chassis=7,slot=0
        -device xio3130-downstream,id=sw1dn1,bus=sw1,addr=0x1,chassis=7,slot=1)
    local g bus
    for g in gpu0:sw0dn0 gpu1:sw0dn1 gpu2:rp0b gpu3:rp2a gpu4:sw1dn0 gpu5:sw1dn1; do
        bus="${g#*:}"; g="${g%%:*}"
        # JSON syntax: "socket" is a SocketAddress struct, which the key=value syntax cannot set.
        TOPO+=(-device "{\"driver\":\"vfio-user-pci\",\"id\":\"$g\",\"bus\":\"$bus\",\"socket\":{\"type\":\"unix\",\"path\":\"$VFIO_USER_DIR/$g.sock\"}}")
    done
}

# pcie-costs: the PCIe settings that decide a peer request's route and speed, set both ways
# (vp2p check's throughput items). Devices are virtio-scsi-pci functions (class 0x010000,
# modern only, no backend needed; select them with --gpu-class 0100), four with ats=on
# (QEMU adds the ATS extended capability, ID 0x000F, Enable clear) and two without; the
# IOMMU offers Device-TLBs (device-iotlb=on: ECAP.DT, and the DMAR table's ATSR covers all
# root ports), so the guest kernel turns ATS on where the capability is present and the
# IOMMU translates. Root ports carry narrowed link capabilities (x-width/x-speed set
# LnkCap of the port only; an emulated endpoint's LnkCap and LnkSta stay x1 2.5 GT/s and
# the port's LnkSta mirrors the device below, capped by the port's LnkCap).
#
#   pxb0 (pci0000:20, numa_node 0)
#   |- root port rp0a (x16, 16 GT/s) -> switch sw0 (x3130) -> sw0dn0 -> dev0 ats=on
#   |                                                      |- sw0dn1 -> dev1 ats=on
#   |                                                      `- sw0dn2 -> dev2 (no ATS)
#   `- root port rp0b (x4, 8 GT/s)  -> dev3 ats=on
#   pxb1 (pci0000:80, numa_node 1)
#   |- root port rp1a (x1, 2.5 GT/s) -> dev4 ats=on
#   `- root port rp1b (default x32, 16 GT/s) -> dev5 (no ATS)
topo_pcie_costs() {
    topo_common
    IOMMU_DEFAULT_OPTS="intremap=on,caching-mode=on,device-iotlb=on"
    TOPO+=(-device pxb-pcie,id=pxb0,bus=pcie.0,addr=0x10,bus_nr=0x20,numa_node=0
        -device pcie-root-port,id=rp0a,bus=pxb0,addr=0x0,chassis=2,slot=0,x-speed=16,x-width=16
        -device x3130-upstream,id=sw0,bus=rp0a
        -device xio3130-downstream,id=sw0dn0,bus=sw0,addr=0x0,chassis=3,slot=0
        -device xio3130-downstream,id=sw0dn1,bus=sw0,addr=0x1,chassis=3,slot=1
        -device xio3130-downstream,id=sw0dn2,bus=sw0,addr=0x2,chassis=3,slot=2
        -device virtio-scsi-pci,id=dev0,bus=sw0dn0,disable-legacy=on,ats=on
        -device virtio-scsi-pci,id=dev1,bus=sw0dn1,disable-legacy=on,ats=on
        -device virtio-scsi-pci,id=dev2,bus=sw0dn2,disable-legacy=on
        -device pcie-root-port,id=rp0b,bus=pxb0,addr=0x1,chassis=4,slot=0,x-speed=8,x-width=4
        -device virtio-scsi-pci,id=dev3,bus=rp0b,disable-legacy=on,ats=on
        -device pxb-pcie,id=pxb1,bus=pcie.0,addr=0x12,bus_nr=0x80,numa_node=1
        -device pcie-root-port,id=rp1a,bus=pxb1,addr=0x0,chassis=5,slot=0,x-speed=2_5,x-width=1
        -device virtio-scsi-pci,id=dev4,bus=rp1a,disable-legacy=on,ats=on
        -device pcie-root-port,id=rp1b,bus=pxb1,addr=0x1,chassis=6,slot=0
        -device virtio-scsi-pci,id=dev5,bus=rp1b,disable-legacy=on)
}

# The fleet shapes: eight GPUs laid out as real 8-GPU servers lay them out, for the DRA tests'
# 8-GPU node and scripts/fleet.sh. "GPUs" are NVMe stand-ins, NICs e1000e functions (the
# fleet makes them RDMA NICs as a ConnectX shows in sysfs: tests/fixtures/README.md). A switch
# below each root port and a root port per GPU elsewhere, so each GPU has an IOMMU group of
# its own, as below two-socket's sw0. NVLinks are not QEMU's to show.
nic() { TOPO+=(-netdev "user,id=net$1,restrict=on" -device "e1000e,id=nic$1,bus=$2,netdev=net$1,romfile="); }

# eight-gpu: four GPUs below each of two switches of one root complex (a "single root"
# 8-GPU server), and the NIC on a root port of its own.
#
#   pxb0 (pci0000:20, numa_node 0)
#   |- root port rp00 -> switch sw0 -> sw0dn0..sw0dn3 -> gpu0..gpu3   23:00.0 .. 26:00.0
#   |- root port rp01 -> switch sw1 -> sw1dn0..sw1dn3 -> gpu4..gpu7   29:00.0 .. 2c:00.0
#   `- root port rp02 -> nic1                                          2d:00.0
#
#   gpu0..gpu3 pairwise PIX, gpu4..gpu7 pairwise PIX, across the switches PHB; NIC PHB.
topo_eight_gpu() {
    topo_common
    TOPO+=(-device pxb-pcie,id=pxb0,bus=pcie.0,addr=0x10,bus_nr=0x20,numa_node=0)
    local s k
    for s in 0 1; do
        TOPO+=(-device "pcie-root-port,id=rp0$s,bus=pxb0,addr=0x$s,chassis=$((2 + 2 * s)),slot=0"
            -device "x3130-upstream,id=sw$s,bus=rp0$s")
        for k in 0 1 2 3; do
            TOPO+=(-device "xio3130-downstream,id=sw${s}dn$k,bus=sw$s,addr=0x$k,chassis=$((3 + 2 * s)),slot=$k")
            gpu "gpu$((4 * s + k))" "sw${s}dn$k"
        done
    done
    TOPO+=(-device pcie-root-port,id=rp02,bus=pxb0,addr=0x2,chassis=6,slot=0)
    nic 1 rp02
}

# switch-pairs: two sockets, two root complexes each, and below each root complex a switch
# with two GPUs and a NIC: the PCIe layout of an HGX/DGX 8-GPU board (whose GPUs are also
# joined by NVSwitch: the fleet's nvswitch tree is this one with an NVLink map beside it).
#
#   pxb0 (pci0000:20, node 0) -> rp -> sw0 -> gpu0, gpu1, nic1
#   pxb1 (pci0000:40, node 0) -> rp -> sw1 -> gpu2, gpu3, nic2
#   pxb2 (pci0000:80, node 1) -> rp -> sw2 -> gpu4, gpu5, nic3
#   pxb3 (pci0000:a0, node 1) -> rp -> sw3 -> gpu6, gpu7, nic4
#
#   gpu0-gpu1 PIX (and with nic1), gpu0-gpu2 NODE, gpu0-gpu4 SYS.
topo_switch_pairs() {
    topo_common
    local s busnr node
    for s in 0 1 2 3; do
        busnr=$(( (s < 2 ? 0x20 : 0x80) + (s % 2) * 0x20 )) node=$((s / 2))
        TOPO+=(-device "pxb-pcie,id=pxb$s,bus=pcie.0,addr=0x$((10 + s)),bus_nr=$busnr,numa_node=$node"
            -device "pcie-root-port,id=rp$s,bus=pxb$s,addr=0x0,chassis=$((2 + 2 * s)),slot=0"
            -device "x3130-upstream,id=sw$s,bus=rp$s"
            -device "xio3130-downstream,id=sw${s}dn0,bus=sw$s,addr=0x0,chassis=$((3 + 2 * s)),slot=0"
            -device "xio3130-downstream,id=sw${s}dn1,bus=sw$s,addr=0x1,chassis=$((3 + 2 * s)),slot=1"
            -device "xio3130-downstream,id=sw${s}dn2,bus=sw$s,addr=0x2,chassis=$((3 + 2 * s)),slot=2")
        gpu "gpu$((2 * s))" "sw${s}dn0"
        gpu "gpu$((2 * s + 1))" "sw${s}dn1"
        nic $((s + 1)) "sw${s}dn2"
    done
}

# root-ports: one GPU per root port, no switch, two sockets with two root complexes each
# (as a server whose CPUs give every slot its own root port), a NIC on each socket's first.
#
#   pxb0 (pci0000:20, node 0): rp -> gpu0, rp -> gpu1, rp -> nic1
#   pxb1 (pci0000:40, node 0): rp -> gpu2, rp -> gpu3
#   pxb2 (pci0000:80, node 1): rp -> gpu4, rp -> gpu5, rp -> nic2
#   pxb3 (pci0000:a0, node 1): rp -> gpu6, rp -> gpu7
#
#   gpu0-gpu1 PHB, gpu0-gpu2 NODE, gpu0-gpu4 SYS; no PIX or PXB pair.
topo_root_ports() {
    topo_common
    local s busnr node k chassis=2
    for s in 0 1 2 3; do
        busnr=$(( (s < 2 ? 0x20 : 0x80) + (s % 2) * 0x20 )) node=$((s / 2))
        TOPO+=(-device "pxb-pcie,id=pxb$s,bus=pcie.0,addr=0x$((10 + s)),bus_nr=$busnr,numa_node=$node")
        for k in 0 1; do
            TOPO+=(-device "pcie-root-port,id=rp$s$k,bus=pxb$s,addr=0x$k,chassis=$chassis,slot=0")
            chassis=$((chassis + 1))
            gpu "gpu$((2 * s + k))" "rp$s$k"
        done
        if [ $((s % 2)) -eq 0 ]; then
            TOPO+=(-device "pcie-root-port,id=rp${s}2,bus=pxb$s,addr=0x2,chassis=$chassis,slot=0")
            chassis=$((chassis + 1))
            nic $((s / 2 + 1)) "rp${s}2"
        fi
    done
}

# args: q35 with two NUMA nodes of shared memory (vfio-user servers can map it), and every
# device from --topology-args FILE. Used by the mirrored-layout end-to-end test.
topo_args() {
    [ -r "$TOPO_ARGS" ] || { echo "error: topology args needs --topology-args FILE" >&2; exit 2; }
    TOPO+=(-machine q35 -smp 2,sockets=2,cores=1,threads=1 -m 1G
        -object memory-backend-memfd,id=mem0,size=512M,share=on -numa node,nodeid=0,memdev=mem0
        -object memory-backend-memfd,id=mem1,size=512M,share=on -numa node,nodeid=1,memdev=mem1
        -numa cpu,node-id=0,socket-id=0 -numa cpu,node-id=1,socket-id=1)
    local line
    while IFS= read -r line || [ -n "$line" ]; do
        [ -n "$line" ] && TOPO+=("$line")
    done <"$TOPO_ARGS"
}

TOPOLOGIES="two-socket nested-switch eight-gpu switch-pairs root-ports vfio-user-gpus pcie-costs args"

# ----------------------------------------------------------------------------- arguments
QEMU_SEL="" TOPOLOGY="" IOMMU="" INITRD="" TIMEOUT=120 LOGFILE="" APPEND="" PRINT=0 VFIO_USER_DIR="" TOPO_ARGS=""
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --qemu) QEMU_SEL="${2:?}"; shift 2 ;;
        --topology) TOPOLOGY="${2:?}"; shift 2 ;;
        --iommu) IOMMU="${2:?}"; shift 2 ;;
        --initrd) INITRD="${2:?}"; shift 2 ;;
        --timeout) TIMEOUT="${2:?}"; shift 2 ;;
        --log) LOGFILE="${2:?}"; shift 2 ;;
        --append) APPEND="${2?}"; shift 2 ;;
        --extra) read -r -a w <<<"${2?}"; EXTRA+=(${w[@]+"${w[@]}"}); shift 2 ;;
        --print-cmd) PRINT=1; shift ;;
        --vfio-user-dir) VFIO_USER_DIR="${2:?}"; shift 2 ;;
        --topology-args) TOPO_ARGS="${2:?}"; shift 2 ;;
        --list-topologies) echo "$TOPOLOGIES"; exit 0 ;;
        -h|--help) usage ;;
        *) echo "error: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$QEMU_SEL" ] && [ -n "$TOPOLOGY" ] && [ -n "$IOMMU" ] && [ -n "$INITRD" ] || usage
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] && [ "$TIMEOUT" -gt 0 ] || { echo "error: --timeout wants seconds" >&2; exit 2; }
load_paths
case "$QEMU_SEL" in
    7.2|7) QEMU="$VP2P_QEMU72" ;;
    10|10.*|11|11.*) QEMU="$VP2P_QEMU10" ;;
    */*) QEMU="$QEMU_SEL" ;;
    *) echo "error: --qemu wants 7.2, 10 or a path" >&2; exit 2 ;;
esac
[ -x "$QEMU" ] || { echo "error: QEMU binary $QEMU missing; run setup.sh" >&2; exit 2; }
[ -r "$INITRD" ] || { echo "error: initrd $INITRD not readable" >&2; exit 2; }
[ -r "$VP2P_KERNEL" ] || { echo "error: kernel $VP2P_KERNEL missing; run setup.sh" >&2; exit 2; }

TOPO=() IOMMU_DEFAULT_OPTS="intremap=on,caching-mode=on"
case "$TOPOLOGY" in
    two-socket) topo_two_socket ;;
    nested-switch) topo_nested_switch ;;
    eight-gpu) topo_eight_gpu ;;
    switch-pairs) topo_switch_pairs ;;
    root-ports) topo_root_ports ;;
    vfio-user-gpus) topo_vfio_user_gpus ;;
    pcie-costs) topo_pcie_costs ;;
    args) topo_args ;;
    *) echo "error: unknown topology '$TOPOLOGY' (known: $TOPOLOGIES)" >&2; exit 2 ;;
esac

CMDLINE="console=ttyS0,115200 panic=-1 quiet rdinit=/init"
IOMMU_DEV=()
case "$IOMMU" in
    # TCG: intremap=on works without kernel-irqchip=split (that is only required with KVM).
    on) IOMMU_DEV=(-device "intel-iommu,${VP2P_IOMMU_OPTS:-$IOMMU_DEFAULT_OPTS}")
        CMDLINE="$CMDLINE intel_iommu=on" ;;
    off) ;;
    *) echo "error: --iommu wants on or off" >&2; exit 2 ;;
esac
[ -z "$APPEND" ] || CMDLINE="$CMDLINE $APPEND"

ACCEL="tcg"
[ -z "${VP2P_SMP_THREADS:-}" ] || ACCEL="tcg,thread=$VP2P_SMP_THREADS"
# intel-iommu goes before every PCI device (QEMU requires it before assigned devices).
CMD=("$QEMU" -accel "$ACCEL" -nodefaults -no-user-config -display none -no-reboot
    -serial stdio -monitor none
    "${IOMMU_DEV[@]}" "${TOPO[@]}"
    -kernel "$VP2P_KERNEL" -initrd "$INITRD" -append "$CMDLINE"
    "${EXTRA[@]}")
if [ "$PRINT" = 1 ]; then printf '%q ' "${CMD[@]}"; echo; exit 0; fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/vp2p-boot.XXXXXX")"
if [ -n "$LOGFILE" ]; then mkdir -p "$(dirname "$LOGFILE")"; LOG="$LOGFILE"; else LOG="$WORK/serial.log"; fi
trap 'rm -rf "$WORK"' EXIT
log "$(basename "$QEMU") $(qemu_version "$QEMU"), topology $TOPOLOGY, iommu $IOMMU, timeout ${TIMEOUT}s"
t0=$(date +%s.%N)
# timeout(1) kills QEMU after TIMEOUT s. If boot.sh itself gets TERM/INT/HUP, it passes the
# signal to timeout(1), which forwards it to QEMU, so no QEMU outlives its caller.
(
    timeout -k 5 "$TIMEOUT" "${CMD[@]}" </dev/null 2>&1 &
    echo $! >"$WORK/pid"
    rc=0; wait $! || rc=$?
    echo "$rc" >"$WORK/rc"
) | tee "$LOG" &
PIPE=$!
on_signal() {
    log "interrupted: stopping QEMU"
    [ -s "$WORK/pid" ] && kill -TERM "$(cat "$WORK/pid")" 2>/dev/null
    wait "$PIPE" 2>/dev/null
    exit 130
}
trap on_signal TERM INT HUP
wait "$PIPE" || true
trap - TERM INT HUP
echo   # the console's last line has no newline
qrc="$(cat "$WORK/rc" 2>/dev/null || echo 255)"
dt=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    log "TIMEOUT: guest did not power off within ${TIMEOUT}s (QEMU killed)"; exit 124
fi
if [ "$qrc" != 0 ]; then log "QEMU failed with exit status $qrc after ${dt}s"; exit 4; fi
exitline="$(tr -d '\r' <"$LOG" | grep -a -o '==VP2P-EXIT [0-9]*' | tail -n1 || true)"
if [ -z "$exitline" ]; then
    log "guest powered off/rebooted after ${dt}s without printing ==VP2P-EXIT== (panic or init crash?)"; exit 3
fi
grc="${exitline##* }"
log "guest finished in ${dt}s, init script rc=$grc"
[ "$grc" = 0 ] || exit 1
exit 0
