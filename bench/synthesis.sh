#!/usr/bin/env bash
# Exact-length synthesis throughput (tokens per second per core) with the Qwen
# tokenizer, for 128-, 4,096- and 32,768-token prompts. Single-threaded, so the
# figure is per core. BENCH_SMOKE=1 runs a few iterations in the dev profile.
set -euo pipefail
cd "$(dirname "$0")/.."
tok="$(examples/fetch-tokenizers.sh)/qwen/tokenizer.json"
if [ -n "${BENCH_SMOKE:-}" ]; then
  echo "(smoke run of synthesis.sh: a few iterations in a debug build; the figures are noise)"
  cargo bench --quiet --profile dev -p batchbench-engine --bench synthesis -- "$tok"
else
  cargo bench --quiet -p batchbench-engine --bench synthesis -- "$tok"
fi
