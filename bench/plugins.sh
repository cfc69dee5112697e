#!/usr/bin/env bash
# Per-request cost of a router as a WebAssembly component and as a native library,
# against the same router compiled in, in nanoseconds (one process, one run).
# Target: the wasm router adds under 5 us per request. BENCH_SMOKE=1 runs a few
# iterations in the dev profile.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
examples/plugins/build.sh >/dev/null
lib="$(basename "$(ls "$target"/debug/*jsonl_reporter.{so,dylib,dll} 2>/dev/null | head -1)")"
if [ -n "${BENCH_SMOKE:-}" ]; then
  echo "(smoke run of plugins.sh: a few iterations in a debug build; the figures are noise)"
  cargo bench --quiet --profile dev -p batchbench --bench plugin_overhead -- \
    "$target/wasm32-wasip2/release/header_router.wasm" "$target/debug/$lib"
else
  cargo build --quiet --release -p jsonl-reporter
  cargo bench --quiet -p batchbench --bench plugin_overhead -- \
    "$target/wasm32-wasip2/release/header_router.wasm" "$target/release/$lib"
fi
