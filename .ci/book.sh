#!/usr/bin/env bash
# Builds the book with a pinned mdbook, installed once into a cache outside the clone.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}"
mdbook_version=0.4.52
mdbook="$cache/tools/bin/mdbook"
if ! "$mdbook" --version 2>/dev/null | grep -q "v$mdbook_version"; then
  cargo install mdbook --locked --version "$mdbook_version" --root "$cache/tools" --quiet
fi
"$mdbook" build book
# Every page that includes a file from the repository must find it.
if grep -rn "{{#include" book/src | grep -v "^Binary" >/dev/null; then
  ! grep -rn "Could not read file" book/book >/dev/null
fi
