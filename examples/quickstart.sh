#!/usr/bin/env bash
# Installs batchbench and runs a benchmark: against HOST when given, otherwise
# against the built-in simulator. Extra arguments go to batchbench.
#
#   examples/quickstart.sh                         # simulator
#   examples/quickstart.sh http://localhost:8000   # your server (add --model ...)
set -euo pipefail
cd "$(dirname "$0")/.."
host="${1:-sim://}"
[ $# -gt 0 ] && shift
cargo install --locked --quiet --path bins/batchbench
tokenizers="$(examples/fetch-tokenizers.sh)"
exec batchbench --host "$host" --tokenizer-model "$tokenizers/qwen/tokenizer.json" \
  --users 8 --requests-per-user 2 --input-tokens 256 --output-tokens 64 "$@"
