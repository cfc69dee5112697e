#!/usr/bin/env bash
# Builds the fuzz targets with coverage instrumentation (cargo fuzz, stable
# toolchain) and runs each for SECONDS (default 30) from the seed corpora under
# seeds/. New inputs go to a working corpus outside the clone, kept between runs
# so that fuzzing time adds up; a crash stops the script with the input's path.
#
#   bash tests/fuzz/run.sh             # every target, 30 s each
#   bash tests/fuzz/run.sh 3600 gguf_metadata   # one target for an hour
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
secs="${1:-30}"
shift || true
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}"
work="$cache/fuzz"
export CARGO_TARGET_DIR="$cache/fuzz-target"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2 --quiet
fi
# cargo fuzz passes unstable -Z flags to rustc; with no sanitizer they only add
# coverage counters, which the stable compiler takes when bootstrapping is allowed.
# Optimised, with debug assertions: an overflow is a crash too.
export RUSTC_BOOTSTRAP=1
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
cargo fuzz build --sanitizer none -O -a
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  echo "== fuzz $t for $secs s"
  cargo fuzz run --sanitizer none -O -a "$t" "$work/corpus/$t" "$here/seeds/$t" -- \
    -max_total_time="$secs" -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 \
    2>&1 | grep -E "^(#[0-9]+.*DONE|Done|stat::number_of_executed_units|stat::peak_rss|INFO: seed corpus|==[0-9]+== ERROR|thread .* panicked|SUMMARY|Test unit written)" || true
  # cargo fuzz names its own artifact directory first; the later flag wins, but
  # look in both.
  if [ -n "$(find "$work/artifacts/$t" "$here/artifacts/$t" -type f 2>/dev/null | head -1)" ]; then
    echo "fuzz $t: a crash; the inputs are in $work/artifacts/$t" >&2
    exit 1
  fi
done
echo "fuzzing done: ${#targets[@]} targets, $secs s each"
