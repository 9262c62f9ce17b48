#!/usr/bin/env bash
# Fuzz the config-space walkers or the P2P capability decoder of p2p-topology, or the
# overlay's read/write sequences and the vfio-user server of p2p-host.
#
#   scripts/fuzz.sh walkers 600           # seed, then fuzz the walkers for 600 s
#   scripts/fuzz.sh capability 180        # the capability decoder for 180 s
#   scripts/fuzz.sh overlay 600           # config bytes + guest reads and writes
#   scripts/fuzz.sh serve 600             # one client per input against p2p-host serve
#   scripts/fuzz.sh dma_windows 600       # serve vfio='s DMA windows under map/unmap sequences
#   scripts/fuzz.sh nccl_xml 600          # NCCL topology files into the reader and NCCL's model
#   scripts/fuzz.sh serve_conf 600        # serve --gpus-from's conf parser on any text
#   scripts/fuzz.sh device_plugin 600     # each device-plugin gRPC handler, requests from bytes
#   scripts/fuzz.sh plugin_hook 600       # MutateDomain: requests from bytes, mutated real domains
#   scripts/fuzz.sh dra_driver 600        # the DRA driver's prepare/unprepare: requests and claims from bytes
#   scripts/fuzz.sh seed                  # only (re)write the seed corpora
#   scripts/fuzz.sh walkers 60 -seed=1    # arguments after the seconds go to libFuzzer
#
# One process, one job (the same as libFuzzer's -jobs=1, with the output on the
# terminal rather than in fuzz-0.log). The final "#N DONE cov: ... ft: ... corp: ..."
# line and the stat:: lines are the run's record.
#
# Knobs (environment):
#   FUZZ_FIXTURES   directories searched for sysfs.tgz and unpacked sysfs/ trees
#                   (default: tests/fixtures); every PCI function's config file
#                   becomes a seed, whole and cut to 64 and 256 bytes
#   FUZZ_FEATURES   extra cargo features of the fuzz crate (region-check, the rule that
#                   bytes past a region never change a walker's result, is on by default)
#   FUZZ_SANITIZER  cargo fuzz --sanitizer (default address; "none" is faster)
#
# The corpora (fuzz/corpus/<target>) and crashes (fuzz/artifacts/<target>) are
# git-ignored: seeds are regenerated from the fixtures on every run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
fuzz="$root/fuzz"
target=${1:?usage: scripts/fuzz.sh walkers|capability|seed [seconds] [libFuzzer args...]}
seconds=${2:-600}
shift $(($# < 2 ? $# : 2))

ensure_cargo_fuzz() {
    rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
    cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
}

# Byte at offset $2 of file $1, as a decimal number (empty past the end).
byte() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n'; }

# Writes the P2P capability for clique $2 with next pointer $3 at offset $4 of file $1.
put_p2p() {
    local clique=$(($2 << 3))
    printf "\\x09\\x$(printf %02x "$3")\\x08P2P\\x$(printf %02x "$clique")\\x00" |
        dd of="$1" bs=1 seek="$4" conv=notrunc status=none
}

# Copies $1 to corpus dir $2 under its content hash (so reruns add nothing new).
add_seed() {
    local sum
    sum=$(sha1sum <"$1" | cut -c1-16)
    cp "$1" "$2/$3-$sum"
}

seed_walkers() {
    local corpus=$1 work configs=() f tgz last ptr n=0
    work=$(mktemp -d)
    for dir in ${FUZZ_FIXTURES:-$root/tests/fixtures}; do
        for tgz in "$dir"/*/sysfs.tgz; do
            [ -f "$tgz" ] || continue
            mkdir -p "$work/$n" && tar -xzf "$tgz" -C "$work/$n" && n=$((n + 1))
        done
        while IFS= read -r f; do configs+=("$f"); done < <(find "$dir" -name config -type f -path '*/devices/pci*')
    done
    while IFS= read -r f; do configs+=("$f"); done < <(find "$work" -name config -type f -path '*/devices/pci*')
    for f in "${configs[@]}"; do
        add_seed "$f" "$corpus" fixture
        head -c 64 "$f" >"$work/cut" && add_seed "$work/cut" "$corpus" header
        head -c 256 "$f" >"$work/cut" && add_seed "$work/cut" "$corpus" legacy
        # What the host overlay serves: the P2P capability appended at 0xc8.
        [ "$(stat -c %s "$f")" -ge 256 ] && [ $(($(byte "$f" 6) & 0x10)) -ne 0 ] || continue
        last=0x34 ptr=$(($(byte "$f" 0x34) & 0xfc))
        for _ in $(seq 48); do
            [ "$ptr" -ge 64 ] || break
            last=$((ptr + 1)) ptr=$(($(byte "$f" $((ptr + 1))) & 0xfc))
        done
        [ "$ptr" -eq 0 ] || continue
        cp "$f" "$work/p2p"
        printf '\xc8' | dd of="$work/p2p" bs=1 seek=$((last)) conv=notrunc status=none
        put_p2p "$work/p2p" 5 0 $((0xc8))
        add_seed "$work/p2p" "$corpus" p2p
    done
    rm -rf "$work"
    echo "walkers: ${#configs[@]} config files -> $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

seed_capability() {
    local corpus=$1 f clique
    f=$(mktemp)
    for clique in $(seq 0 15); do
        : >"$f" && put_p2p "$f" "$clique" 0 0 && add_seed "$f" "$corpus" clique
        : >"$f" && put_p2p "$f" "$clique" $((0xd4)) 0 && add_seed "$f" "$corpus" linked
    done
    # Version 1, a length of 12, and a truncated capability.
    printf '\x09\x00\x08P2P\x29\x00' >"$f" && add_seed "$f" "$corpus" version
    printf '\x09\x00\x0cP2P\x08\x00\x00\x00\x00\x00' >"$f" && add_seed "$f" "$corpus" length
    printf '\x09\x00\x08P2P\x08' >"$f" && add_seed "$f" "$corpus" short
    rm -f "$f"
    echo "capability: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

# Overlay seeds: 2 option bytes, a fixture's first 256 config bytes, then a few
# guest writes at the capability's slots and reads ([kind, offset, len, data]).
seed_overlay() {
    local corpus=$1 f work
    work=$(mktemp -d)
    for f in "$fuzz/corpus/walkers"/legacy-*; do
        [ -f "$f" ] || continue
        { printf '\x00\x05'; head -c 256 "$f"; printf '\x00\xc8\x04\xff\xff\xff\xff\x01\xc8\x08\x00\xb1\x01\x00\x02\x06\x02\xff\xff'; } >"$work/s"
        add_seed "$work/s" "$corpus" config
    done
    rm -rf "$work"
    echo "overlay: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

# Serve seeds: VERSION, then DEVICE_GET_INFO, a config REGION_READ and a
# REGION_WRITE to the capability (records: command, flags, length, body).
seed_serve() {
    local corpus=$1 f
    f=$(mktemp)
    printf '\x01\x04\x00\x00\x00' >"$f" && add_seed "$f" "$corpus" info
    printf '\x01\x09\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x01\x00\x00' >"$f" && add_seed "$f" "$corpus" read
    printf '\x01\x0a\x00\x14\x00\xc8\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x04\x00\x00\x00\xff\xff\xff\xff' >"$f" && add_seed "$f" "$corpus" write
    rm -f "$f"
    echo "serve: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

# NCCL XML seeds: every XML file holding a <system element under the fixtures,
# the docs' examples and the recorded runs (NCCL's topology files and dumps; a
# libvirt domain's smbios <system> matches too), whole and cut in half.
seed_nccl_xml() {
    local corpus=$1 f work
    work=$(mktemp -d)
    while IFS= read -r f; do
        grep -q '<system' "$f" || continue
        add_seed "$f" "$corpus" file
        head -c $(($(stat -c %s "$f") / 2)) "$f" >"$work/cut" && add_seed "$work/cut" "$corpus" cut
    done < <(find ${FUZZ_FIXTURES:-$root/tests/fixtures} "$root/docs/examples" "$root/docs/results" -name '*.xml' -type f)
    rm -rf "$work"
    echo "nccl_xml: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}


# Serve conf seeds: the packaged example, a vfio= line, a socket given twice,
# a socket path of 107 and of 108 bytes.
seed_serve_conf() {
    local corpus=$1 f long
    f=$(mktemp)
    add_seed "$root/host/cli/packaging/serve.conf" "$corpus" example
    printf 'socket=/run/vp2p/vm1/e.sock,vfio=0000:00:03.0,clique=2,allow-non-nvidia # edu\n' >"$f" && add_seed "$f" "$corpus" vfio
    printf 'socket=/run/a.sock,config=/c,clique=1\nsocket=/run/a.sock,config=/d,clique=2,resource=/r,max-bar=256M,any-offset=off\n' >"$f" && add_seed "$f" "$corpus" twice
    long=$(printf 's%.0s' $(seq 97))
    printf 'socket=/run/%s.sock,config=/c,clique=3\n' "$long" >"$f" && add_seed "$f" "$corpus" fits
    printf 'socket=/run/%sx.sock,config=/c,clique=3\n' "$long" >"$f" && add_seed "$f" "$corpus" toolong
    rm -f "$f"
    echo "serve_conf: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

# A length-delimited protobuf field: key byte $1 (number << 3 | 2), then the
# length of $2 (under 128 bytes: one varint byte) and $2, as printf %b text.
ld() { printf '\\x%02x\\x%02x%s' "$1" "${#2}" "$2"; }

# Device plugin seeds: a method byte (0 options, 1 ListAndWatch, 2 preferred,
# 3 Allocate, 4 PreStartContainer; +128 for the strict policy), then the
# request in the published encoding (host/kube/proto/kubelet_deviceplugin_v1beta1.proto).
seed_device_plugin() {
    local corpus=$1 f ids="" g
    f=$(mktemp)
    for g in 0000:25:00.0 0000:26:00.0 0000:27:00.0 0000:28:00.0 0000:81:00.0; do
        ids+=$(ld 0x0a "$g")
    done
    printf '\x00' >"$f" && add_seed "$f" "$corpus" options
    printf '\x01' >"$f" && add_seed "$f" "$corpus" list
    # container_requests { available_deviceIDs x5, allocation_size 2 }.
    local inner
    inner=$(printf '%b' "$ids\\x18\\x02")
    printf '\x02%b' "$(ld 0x0a "$inner")" >"$f" && add_seed "$f" "$corpus" preferred
    printf '\x82%b' "$(ld 0x0a "$inner")" >"$f" && add_seed "$f" "$corpus" preferred-strict
    inner=$(printf '%b' "$(ld 0x0a 0000:25:00.0)$(ld 0x0a 0000:28:00.0)")
    printf '\x03%b' "$(ld 0x0a "$inner")" >"$f" && add_seed "$f" "$corpus" allocate
    printf '\x04%b' "$(ld 0x0a 0000:25:00.0)" >"$f" && add_seed "$f" "$corpus" prestart
    rm -f "$f"
    echo "device_plugin: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

# Plugin hook seeds: byte 1 and each real domain of tests/fixtures/domains (the
# target wraps it in a Boot request); byte 0 and a whole MutateDomainRequest.
seed_plugin_hook() {
    local corpus=$1 f d
    f=$(mktemp)
    for d in "$root"/tests/fixtures/domains/*.xml; do
        { printf '\x01'; cat "$d"; } >"$f" && add_seed "$f" "$corpus" domain
    done
    local req
    req=$(ld 0x0a libvirt)$(ld 0x12 '<domain type="kvm"><name>v</name></domain>')$(ld 0x1a '{}')
    req+=$(ld 0x22 "$(printf '%b' "$(ld 0x0a Boot)")")
    printf '\x00%b' "$req" >"$f" && add_seed "$f" "$corpus" request
    rm -f "$f"
    echo "plugin_hook: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

# DRA driver seeds: a method byte (0 v1 prepare, 1 v1 unprepare, 2 v1beta1
# prepare, 3 v1beta1 unprepare), the request's length (two bytes,
# little-endian), the request in the published encoding
# (host/kube/proto/kubelet_dra_v1.proto: Claim namespace 1, uid 2, name 3),
# then the ResourceClaim every named claim reads as: one published device,
# one left out (25:00.0 shares its group).
seed_dra_driver() {
    local corpus=$1 f req n m dev claim
    f=$(mktemp)
    req=$(mktemp)
    printf '%b' "$(ld 0x0a "$(printf '%b' "$(ld 0x0a vms)$(ld 0x12 u1)$(ld 0x1a vm)")")" >"$req"
    n=$(stat -c %s "$req")
    for dev in gpu-0000-27-00-0 gpu-0000-25-00-0; do
        claim='{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"vm","namespace":"vms","uid":"u1"},'
        claim+='"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"vp2p-gpu"}}]}},'
        claim+='"status":{"allocation":{"devices":{"results":[{"request":"gpu","driver":"gpu.vp2p.io","pool":"node-a","device":"'"$dev"'"}]}}}}'
        for m in 0 1 2 3; do
            { printf '%b' "$(printf '\\x%02x\\x%02x\\x00' "$m" "$n")"; cat "$req"; printf '%s' "$claim"; } >"$f"
            add_seed "$f" "$corpus" "m$m-$dev"
        done
    done
    rm -f "$f" "$req"
    echo "dra_driver: $(find "$corpus" -type f | wc -l) seeds in $corpus"
}

seed() {
    mkdir -p "$fuzz/corpus/walkers" "$fuzz/corpus/capability" "$fuzz/corpus/overlay" "$fuzz/corpus/serve" "$fuzz/corpus/dma_windows" \
        "$fuzz/corpus/nccl_xml" "$fuzz/corpus/serve_conf" "$fuzz/corpus/device_plugin" "$fuzz/corpus/plugin_hook" \
        "$fuzz/corpus/dra_driver"
    seed_walkers "$fuzz/corpus/walkers"
    seed_capability "$fuzz/corpus/capability"
    seed_overlay "$fuzz/corpus/overlay"
    seed_serve "$fuzz/corpus/serve"
    seed_nccl_xml "$fuzz/corpus/nccl_xml"
    seed_serve_conf "$fuzz/corpus/serve_conf"
    seed_device_plugin "$fuzz/corpus/device_plugin"
    seed_plugin_hook "$fuzz/corpus/plugin_hook"
    seed_dra_driver "$fuzz/corpus/dra_driver"
}

case "$target" in
    seed) seed; exit 0 ;;
    walkers) max_len=4352 ;; # past 4096, so bytes beyond the extended region occur
    capability) max_len=64 ;;
    overlay) max_len=1024 ;;
    # The server lives for the whole run: its threads and buffers are no leak.
    serve) max_len=4096; set -- -detect_leaks=0 "$@"; export ASAN_OPTIONS=detect_leaks=0 ;;
    dma_windows) max_len=2600 ;; # 100 DMA_MAP / DMA_UNMAP records of 26 bytes
    nccl_xml) max_len=8192 ;; # the recorded files are 0.2 to 2 KB
    serve_conf) max_len=8192 ;; # a few dozen lines, some past the 107-byte socket limit
    # The plugins' services live for the whole run (tokio's runtime, the tree).
    device_plugin) max_len=4096; set -- -detect_leaks=0 "$@"; export ASAN_OPTIONS=detect_leaks=0 ;;
    plugin_hook) max_len=16384; set -- -detect_leaks=0 "$@"; export ASAN_OPTIONS=detect_leaks=0 ;; # twice the largest domain
    # The driver lives for the whole run; a claim object is under 1 KB.
    dra_driver) max_len=4096; set -- -detect_leaks=0 "$@"; export ASAN_OPTIONS=detect_leaks=0 ;;
    *) echo "unknown target $target (walkers, capability, overlay, serve, dma_windows, nccl_xml, serve_conf, device_plugin, plugin_hook, dra_driver, seed)" >&2; exit 2 ;;
esac

ensure_cargo_fuzz
seed
features=()
[ -z "${FUZZ_FEATURES:-}" ] || features=(--features "$FUZZ_FEATURES")
cd "$root"
exec cargo +nightly fuzz run --fuzz-dir "$fuzz" --sanitizer "${FUZZ_SANITIZER:-address}" "${features[@]}" \
    "$target" "$fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -max_len="$max_len" -print_final_stats=1 "$@"
