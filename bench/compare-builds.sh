#!/usr/bin/env bash
# Client CPU per request of two builds of batchbench, run in alternation against
# one simulator: the check that a refactor left the hot path as it was. Each
# round runs both clients once on the shape users run most (exact 32-token
# prompts with the Qwen tokenizer, 16 output tokens) and on the fixed prompt;
# the figures are the medians over the rounds and their ratio.
#
#   bash bench/compare-builds.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]
#
# Each directory holds a release `batchbench`; AFTER's `batchbench-sim` serves.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
before="$(cd "${1:?BEFORE_BIN_DIR}" && pwd)"
after="$(cd "${2:?AFTER_BIN_DIR}" && pwd)"
rounds="${3:-10}"
users=64; per_user=1000; n=$((users * per_user))
target="$after"
tok="$(examples/fetch-tokenizers.sh)/qwen/tokenizer.json"
start_sim
trap stop_sim EXIT
url="http://127.0.0.1:$port"
exact=(--model "$tok" --input-tokens 32 --output-tokens 16)
fixed=(--output-tokens 16)
cpu_us() { # BIN_DIR ARGS...: CPU microseconds per request of one run
  local bin="$1/batchbench"; shift
  read -r _ cpu _ < <(cpu_of "$n" "$bin" --host "$url" --users "$users" --requests-per-user "$per_user" "$@")
  python3 -c "print(f'{$cpu / $n * 1e6:.3f}')"
}
# Warm both word-table caches (what every run after a user's first one sees).
cpu_us "$before" "${exact[@]}" > /dev/null
cpu_us "$after" "${exact[@]}" > /dev/null

declare -A runs
for round in $(seq "$rounds"); do
  for side in before after; do
    runs[exact.$side]+="$(cpu_us "${!side}" "${exact[@]}") "
    runs[fixed.$side]+="$(cpu_us "${!side}" "${fixed[@]}") "
  done
  echo "round $round of $rounds done" >&2
done
echo "client CPU per request, $n requests x $rounds rounds, $users users, 16 output tokens (median us/request)"
for shape in exact fixed; do
  python3 - "$shape" "${runs[$shape.before]}" "${runs[$shape.after]}" <<'PY'
import statistics, sys
shape, b, a = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
mb, ma = statistics.median(b), statistics.median(a)
ratios = sorted(y / x for x, y in zip(b, a))
print(f"  {shape:5}  before {mb:7.2f}  after {ma:7.2f}  after/before {ma / mb:.3f}"
      f"  (per round: {ratios[0]:.3f} to {ratios[-1]:.3f})")
PY
done
