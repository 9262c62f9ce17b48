#!/usr/bin/env bash
# The test command: sets up everything (scripts/setup.sh) and runs every test of
# the workspace, the QEMU end-to-end tests included. GPU tests are listed as
# ignored here; scripts/gpu.sh runs them on a GPU VM.
#
#   bash scripts/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/setup.sh)"
cargo test --workspace --locked "$@"
