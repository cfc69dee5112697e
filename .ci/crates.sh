#!/usr/bin/env bash
# The crate boundaries, checked rather than hoped for:
#  - the plugin contract side (the contract, results, the built-in plugins, the
#    SDK and a plugin written with it) pulls in no engine, async runtime, HTTP
#    client, tokenizer, histogram or WebAssembly runtime; ClickHouse keeps its
#    own HTTP client but not the engine;
#  - no module of any crate imports another in a circle (.ci/module-cycles.py),
#    and no module of the engine or of the front (framework/run) is over 800
#    lines before its tests;
#  - every workspace crate builds alone, with only the features it asks for
#    (a workspace build unifies features and can hide a missing one), the
#    commands build with none of their optional features, and the libraries'
#    tests pass alone.
set -euo pipefail
cd "$(dirname "$0")/.."

tree_of() { cargo tree --locked -p "$1" -e normal --prefix none; }

for crate in batchbench-contract batchbench-results batchbench-plugins batchbench-plugin-sdk jsonl-reporter; do
  if tree_of "$crate" | grep -E '^(batchbench-engine|tokio|hyper|reqwest|tokenizers|hdrhistogram|wasmtime) '; then
    echo "$crate depends on the engine or its runtime (above); it must need the contract alone" >&2
    exit 1
  fi
done
if tree_of batchbench-clickhouse | grep -E '^batchbench-engine '; then
  echo "batchbench-clickhouse depends on the engine; it must need the contract alone" >&2
  exit 1
fi
echo "contract side: no engine in the trees of the contract, results, built-ins, SDK, ClickHouse"

python3 .ci/module-cycles.py

# Every module of the engine and of the front readable in one sitting: at most
# 800 lines before its tests.
python3 - <<'PY'
import pathlib, re, sys
over = []
for f in sorted(p for d in ("framework/engine/src", "framework/run/src") for p in pathlib.Path(d).rglob("*.rs")):
    lines = f.read_text().split("\n")
    code = next((i for i, l in enumerate(lines) if re.match(r"#\[cfg\(test\)\]", l)), len(lines))
    if code > 800:
        over.append(f"{f}: {code} lines before its tests")
if over:
    print("engine or front modules over 800 lines (split them by idea):", *over, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print("engine and front: every module at most 800 lines before its tests")
PY

packages=$(cargo metadata --locked --no-deps --format-version 1 |
  python3 -c 'import json, sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
for crate in $packages; do
  if ! cargo check --locked --quiet -p "$crate" --all-targets; then
    echo "$crate does not build alone" >&2
    exit 1
  fi
done
echo "every crate builds alone: $packages"

# The smallest build, every optional feature left out (JSON Schema checks,
# audio, the WebAssembly host): it builds without warnings, and a run that
# needs a feature left out names it.
cargo clippy --locked --quiet -p batchbench -p batchbench-agent --no-default-features -- -D warnings
echo "the commands build with no optional feature"

# The libraries' tests, each crate alone. The binaries', the plugin hosts' and
# the end-to-end tests need the example plugins built and are the workspace's
# test step itself.
for crate in batchbench-contract batchbench-engine batchbench-results batchbench-plugins \
  batchbench-plugin-sdk batchbench-clickhouse batchbench-simulator batchbench-run; do
  cargo test --locked --quiet -p "$crate"
done
