#!/usr/bin/env bash
# Template search on the tuning seeds: every candidate claim-template file of a policy run by
# the fleet benchmark on seeds 1..3 (never reported: the reported figures come from seeds 11 on),
# then one line per candidate with the VMs it placed well and refused over every seed, regime
# and size. The same search for vp2p's claims and for NVIDIA's (docs/fleet.md, "Tuning").
#
#   bash scripts/fleet-tune.sh [--trees DIR] [--nodes N] [--seeds K] [--out DIR] [-- FLEET ARGS]
#
# Candidates: vp2p's shipped tiered claims (on slices in address order, and with GPUs published
# `--device-order nic-last`) and tests/fleet/templates/vp2p-*.yaml; NVIDIA's
# generated claims and tests/fleet/templates/nvidia-*.yaml. Defaults: tests/fixtures, 100 nodes,
# 3 seeds, out target/fleet-tune. The last table marks each policy's pick (PICK: the most VMs
# well placed less VMs refused); report it on the test seeds with scripts/fleet.sh --templates /
# --nvidia-templates / --device-order.
set -euo pipefail
cd "$(dirname "$0")/.."
trees=tests/fixtures nodes=100 seeds=3 out=target/fleet-tune
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --trees) trees=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "fleet-tune.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
run() { # NAME POLICY [template flag FILE]
    local name=$1 policy=$2; shift 2
    echo "fleet-tune: $name ($policy) on seeds 1..$seeds, $nodes nodes" >&2
    bash scripts/fleet.sh --trees "$trees" --nodes "$nodes" --seeds "$seeds" --first-seed 1 \
        --policies "$policy" --json "$out/$name.json" --work "$out/work" "$@" "${extra[@]}" \
        > "$out/$name.txt"
}
files=()
run vp2p-shipped vp2p; files+=("$out/vp2p-shipped.json")
run vp2p-nic-last vp2p --device-order nic-last; files+=("$out/vp2p-nic-last.json")
for f in tests/fleet/templates/vp2p-*.yaml; do
    n=$(basename "$f" .yaml); run "$n" vp2p --templates "$f"; files+=("$out/$n.json")
done
run nvidia-generated nvidia; files+=("$out/nvidia-generated.json")
for f in tests/fleet/templates/nvidia-*.yaml; do
    n=$(basename "$f" .yaml); run "$n" nvidia --nvidia-templates "$f"; files+=("$out/$n.json")
done
exec "${CARGO_TARGET_DIR:-target}/debug/fleet" --tuning "${files[@]}"
