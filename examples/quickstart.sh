#!/usr/bin/env bash
# Installs batchbench (batchbench, batchbench-agent, batchbench-sim) and runs a
# benchmark: against HOST when given, otherwise against the built-in simulator.
# Extra arguments go to batchbench.
#
#   examples/quickstart.sh                         # simulator
#   examples/quickstart.sh http://localhost:8000   # your server (add --model ...)
set -euo pipefail
cd "$(dirname "$0")/.."
host="${1:-sim://}"
[ $# -gt 0 ] && shift
# One build directory for the three binaries, so shared crates compile once.
export CARGO_TARGET_DIR="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/install-target"
for bin in batchbench batchbench-agent batchbench-sim; do
  cargo install --locked --quiet --path "bins/$bin"
done
tokenizers="$(examples/fetch-tokenizers.sh)"
exec batchbench --host "$host" --tokenizer-model "$tokenizers/qwen/tokenizer.json" \
  --users 8 --requests-per-user 2 --input-tokens 256 --output-tokens 64 "$@"
