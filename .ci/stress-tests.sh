#!/usr/bin/env bash
# The tests that once waited on time rather than on a signal of readiness, run
# N times in a row (default 50) with every core kept busy and SIGINT ignored,
# as a harness that starts the suite in the background leaves it. A test that
# still leans on timing fails here long before it fails in CI.
#
#   bash .ci/stress-tests.sh [N]
#
# Python's Ctrl+C test runs too when PYTHON names an interpreter with the
# package and pytest installed (as .ci/run's virtual environment has).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-50}"
: "${BATCHBENCH_TOKENIZERS:=$(examples/fetch-tokenizers.sh)}"
export BATCHBENCH_TOKENIZERS

# Each entry: package, test target (lib for unit tests), name filter.
cases=(
  "batchbench cli ctrl_c"
  "batchbench cli sigint"
  "batchbench-agent cli ctrl_c"
  "batchbench-tests e2e sim::a_full_batch_queues_the_rest"
  "batchbench-tests e2e faults::"
  "batchbench-engine lib transport::tests::an_idle_timeout"
  "batchbench-engine lib transport::tests::a_connection_the_server_closed"
  "batchbench-engine lib pacer::"
)

# The test binaries, built once.
binary() {
  local pkg="$1" target="$2" sel
  if [ "$target" = lib ]; then sel=(--lib); else sel=(--test "$target"); fi
  cargo test --locked --quiet -p "$pkg" "${sel[@]}" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])' | tail -1
}
declare -A bins
for c in "${cases[@]}"; do
  read -r pkg target _ <<<"$c"
  key="$pkg/$target"
  [ -n "${bins[$key]:-}" ] || bins[$key]="$(binary "$pkg" "$target")"
  [ -x "${bins[$key]}" ] || { echo "no test binary for $key" >&2; exit 1; }
done

# Every core busy for the whole run.
load=()
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  load+=("$!")
done
trap 'kill "${load[@]}" 2>/dev/null || true' EXIT

trap '' INT
start=$(date +%s)
for round in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    read -r pkg target filter <<<"$c"
    if ! "${bins[$pkg/$target]}" "$filter" --quiet >"/tmp/stress-$$.log" 2>&1; then
      cat "/tmp/stress-$$.log" >&2
      echo "round $round: $pkg $target $filter failed under load with SIGINT ignored" >&2
      exit 1
    fi
  done
  if [ -n "${PYTHON:-}" ]; then
    if ! BATCHBENCH_BIN_DIR="${CARGO_TARGET_DIR:-$PWD/target}/debug" "$PYTHON" -m pytest -q \
      -p no:cacheprovider --import-mode=importlib python/tests -k ctrl_c >"/tmp/stress-$$.log" 2>&1; then
      cat "/tmp/stress-$$.log" >&2
      echo "round $round: python ctrl_c tests failed under load with SIGINT ignored" >&2
      exit 1
    fi
  fi
  printf 'round %d of %d passed (%d s)\n' "$round" "$rounds" "$(( $(date +%s) - start ))"
done
rm -f "/tmp/stress-$$.log"
echo "all ${#cases[@]} cases passed $rounds times in a row on $(nproc) busy cores with SIGINT ignored"
