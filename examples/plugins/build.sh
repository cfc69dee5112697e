#!/usr/bin/env bash
# Builds the example plugins and the test-fixture plugins:
#   WebAssembly components (wasm32-wasip2):
#     target/wasm32-wasip2/release/{header_router,mooncake_trace,hostile_wasm,hostile_router,fleet_router,live_reporter}.wasm
#   native libraries (the host's target, dev profile):
#     target/debug/lib{jsonl_reporter,hostile_dylib,other_abi}.so (.dylib on macOS)
# Honours CARGO_TARGET_DIR. The tests load these files: run this before `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi
cargo build --locked --release --target wasm32-wasip2 \
    -p header-router -p mooncake-trace -p hostile-wasm -p hostile-router -p fleet-router \
    -p live-reporter
cargo build --locked -p jsonl-reporter -p hostile-dylib -p other-abi -p native-codec
