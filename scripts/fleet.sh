#!/usr/bin/env bash
# The fleet benchmark: VM pods of 2, 4 and 8 GPUs placed by the real kube-scheduler on a fleet
# of simulated nodes drawn from sysfs trees, under vp2p's DRA attributes and tiered templates,
# NVIDIA's published attribute set (v0.5.0), counting alone and KubeVirt-consumable claims, against
# a greedy heuristic and the proven optimum (an integer program), over one arrival list per seed
# and regime: counts per VM size (docs/fleet.md).
#
#   bash scripts/fleet.sh --trees DIR [--nodes N] [--regimes fill,churn] [--demand 1.1]
#                         [--churn-loads 0.8,1.0,1.2] [--warmup T] [--window T] [--seeds K]
#                         [--first-seed S] [--policies vp2p,nvidia,count,kubevirt,greedy,optimum]
#                         [--json FILE] [--templates FILE] [--nvidia-templates FILE]
#                         [--scheduler-profile FILE] [--device-order address|nic-last]
#                         [--extender WEIGHT] [--work DIR]
#   bash scripts/fleet.sh --report FILE..    # the tables of saved --json files again
#
# Each subdirectory of DIR is a sysfs tree as --sysfs-root takes it (or holds one in sysfs/ or
# sysfs.tgz); the ones the fleet cannot use are named with the reason. Builds kube-peers (the
# control plane from Kubernetes' own code; needs Go 1.26+, scripts/setup.sh says how to get it)
# and the fleet binary first. The control plane's logs stay in target/fleet/control-plane.
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
    case "$a" in -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
done
# The control plane; an existing build is kept unless tests/kube changed (tests/src/kube.rs).
if [ ! -x "${CARGO_TARGET_DIR:-target}/kube-peers/kube-peers" ]; then
    bash scripts/build-kube-peers.sh
fi
cargo build -q -p p2p-host-cli -p p2p-fleet --bin p2p-host --bin fleet
exec "${CARGO_TARGET_DIR:-target}/debug/fleet" "$@"
