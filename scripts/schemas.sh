#!/usr/bin/env bash
# Regenerates docs/schemas: the JSON Schema of every document p2p-host and
# p2p-guest print, from the types that print them (`p2p-host schema NAME`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p p2p-host-cli -p p2p-guest
mkdir -p docs/schemas
for n in $(target/debug/p2p-host schema | awk '{print $1}'); do
    target/debug/p2p-host schema "$n" >"docs/schemas/vp2p.$n.schema.json"
done
for n in $(target/debug/p2p-guest schema | awk '{print $1}'); do
    target/debug/p2p-guest schema "$n" >"docs/schemas/vp2p.$n.schema.json"
done
ls docs/schemas
