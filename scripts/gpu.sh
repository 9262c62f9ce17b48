#!/usr/bin/env bash
# GPU work for vp2p, in two halves:
#   scripts/gpu.sh build [DIR]   here (no GPU needed): release p2p-guest and the GPU
#                                test binary into DIR (default .carry/)
#   scripts/gpu.sh run [DIR]     on a VM with >= 2 NVIDIA GPUs (no Rust needed):
#                                probe, tune the SM copy kernel, GPU tests, full bench,
#                                max beside single methods, forced-staging bench;
#                                results under $OUT (or ./gpu-results)
set -euo pipefail
cmd=${1:-}
dir=${2:-.carry}

build() {
    mkdir -p "$dir"
    cargo build --release -p p2p-guest
    cp target/release/p2p-guest "$dir/"
    local exe
    exe=$(cargo test --release -p p2p-guest --test gpu --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"]=="gpu"]')
    cp "$exe" "$dir/gpu-tests"
    echo "built $dir/p2p-guest and $dir/gpu-tests"
}

run() {
    local out=${OUT:-./gpu-results}
    local b="$dir/p2p-guest"
    mkdir -p "$out"
    echo "== probe"
    "$b" probe | tee "$out/probe.txt"
    "$b" probe --json > "$out/probe.json"
    echo "== tune the SM copy kernel"
    timeout 120 "$b" tune-sm --json > "$out/tune.json" || echo "tune-sm failed (rc $?): default kernel"
    local variant=vp2p_copy blocks=4 threads=512
    read -r variant blocks threads < <(python3 - "$out/tune.json" <<'PY'
import json, sys
pts = json.load(open(sys.argv[1]))
pts = pts["points"] if isinstance(pts, dict) else pts
best = {}
for p in pts:
    if p["verified"]:
        k = (p["variant"], p["blocks_per_sm"], p["threads"])
        best.setdefault(k, {})[p["mode"]] = p["gbps"]
k = max((k for k, v in best.items() if len(v) == 2), key=lambda k: min(best[k].values()))
print(*k)
print(f"best SM copy: {k} read {best[k]['sm-read']:.1f} write {best[k]['sm-write']:.1f} GB/s", file=sys.stderr)
PY
) || echo "no tuning result: keeping $variant ${blocks}x$threads"
    local sm=(--sm-kernel "$variant" --sm-blocks-per-sm "$blocks" --sm-threads "$threads")
    echo "== doctor (one verdict for the machine; its exit status is the verdict)"
    "$b" doctor --no-progress | tee "$out/doctor.txt" || true
    "$b" doctor --no-progress --json > "$out/doctor.json" || true
    echo "== GPU tests"
    P2P_GUEST_BIN="$b" timeout 300 "$dir/gpu-tests" --ignored --test-threads=1 2>&1 | tee "$out/tests.txt"
    echo "== full bench (peer access as decided)"
    timeout 400 "$b" bench "${sm[@]}" --label "p2p (peer access as decided)" --no-progress \
        --json "$out/bench-p2p.json" > "$out/bench-p2p.txt"
    tail -n 60 "$out/bench-p2p.txt"
    echo "== max beside the single methods (every copy engine and both SM kernels on one transfer)"
    timeout 300 "$b" bench "${sm[@]}" --modes ce,sm-read,sm-write,max --sizes 64M,256M,1G \
        --label "max" --no-progress --json "$out/bench-max.json" > "$out/bench-max.txt"
    grep -A6 "Size sweep" "$out/bench-max.txt" | head -20
    echo "== bench with peer access off (every copy staged)"
    timeout 300 "$b" bench --modes ce,staged,driver --peer-access off --label "peer access off" \
        --no-progress --json "$out/bench-nop2p.json" > "$out/bench-nop2p.txt"
    grep -A4 "ce: unidirectional" "$out/bench-nop2p.txt"
}

case "$cmd" in
    build) build ;;
    run) run ;;
    *) echo "usage: $0 build|run [DIR]" >&2; exit 2 ;;
esac
