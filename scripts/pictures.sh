#!/usr/bin/env bash
# Regenerates the pictures under docs/pictures from the captured trees and the
# recorded bench runs (tests/tests/project/pictures/ fails when they are stale):
#
#   bash scripts/pictures.sh [OUTDIR]      (default docs/pictures)
#
# P2P_HOST / P2P_GUEST name the binaries to use; by default they are built
# (debug) first. Run from anywhere; paths in the pictures are the repository's.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/pictures}"
mkdir -p "$out"
if [ -z "${P2P_HOST:-}" ] || [ -z "${P2P_GUEST:-}" ]; then
    cargo build -q -p p2p-host-cli -p p2p-guest --bins
fi
host="${P2P_HOST:-target/debug/p2p-host}"
guest="${P2P_GUEST:-target/debug/p2p-guest}"
tree=tests/fixtures/qemu-11.1-two-socket-iommu-on

# The two-socket QEMU tree: NVMe controllers stand in for GPUs (class 0108),
# the e1000e is drawn as a NIC (--all-nics).
"$host" topo --sysfs-root "$tree" --gpu-class 0108 --all-nics --svg "$out/two-socket-topo.svg" >/dev/null
# A plan on it: the chooser picks 4 GPUs for "train" and 2 for "infer"; the
# guests mirror the host's tree.
"$host" plan --sysfs-root "$tree" --gpu-class 0108 --vm train=4 --vm infer=2 \
    --guest-topology mirror --svg "$out/two-socket-plan.svg" >/dev/null
# The 2x H200 run of 2026-11-24 (docs/results/h200x2-2026-11-24) as heatmaps.
"$guest" bench --from docs/results/h200x2-2026-11-24/bench-default.json \
    --svg "$out/h200x2-bench.svg" >/dev/null
