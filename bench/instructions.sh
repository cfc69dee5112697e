#!/usr/bin/env bash
# Client instructions per request, counted by callgrind: a figure that does not
# move with the machine's load, for telling a refactor of the hot path from a
# change of it. Each shape is run at N and 2N requests and the figure is the
# difference over N, so that start-up (tokenizer, word table, runtime) cancels.
# The simulator serves in a process of its own, outside valgrind; the client
# runs one thread (--client-threads 1) so that the count does not depend on how
# threads meet.
#
#   bash bench/instructions.sh [BIN_DIR [BIN_DIR2]]
#
# Without a directory it builds the release binaries of this checkout. With two,
# both builds run the same requests against BIN_DIR's simulator, and the ratio is
# printed: `bash bench/instructions.sh BEFORE AFTER` checks that a change left the
# client's cost as it was.
#
# Shapes: the closed loop (64 users) with exact 32-token prompts (the Qwen
# tokenizer) and 16 output tokens, JSON and streamed; and agents (16 x 8 turns,
# 256-token prompts, 64-token tool results).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
command -v valgrind >/dev/null || {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq valgrind) >/dev/null 2>&1 || true
  fi
}
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }

if [ $# -ge 1 ]; then
  dirs=("$(cd "$1" && pwd)")
  [ $# -ge 2 ] && dirs+=("$(cd "$2" && pwd)")
  target="${dirs[0]}"
  tok="$(examples/fetch-tokenizers.sh)/qwen/tokenizer.json"
else
  build batchbench batchbench-agent batchbench-sim
  dirs=("$target")
fi
n="${BENCH_REQUESTS:-2000}"
[ -n "$smoke" ] && n=64
start_sim
trap stop_sim EXIT
url="http://127.0.0.1:$port"

# instructions BIN ARGS...: the instructions callgrind counts for one run.
instructions() {
  local out
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$@" --quiet >/dev/null 2>"$out.log" ||
    { cat "$out.log" >&2; exit 1; }
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
  rm -f "$out" "$out.log"
}

# per_request DIR SHAPE: (I(2N) - I(N)) / N for a shape.
per_request() {
  local bin_dir=$1 shape=$2 a b
  case "$shape" in
  json | stream)
    local users=64 extra=()
    [ "$shape" = stream ] && extra=(--stream)
    local per=$((n / users))
    a=$(instructions "$bin_dir/batchbench" --host "$url" --model "$tok" --client-threads 1 \
      --users "$users" --requests-per-user "$per" --input-tokens 32 --output-tokens 16 "${extra[@]}")
    b=$(instructions "$bin_dir/batchbench" --host "$url" --model "$tok" --client-threads 1 \
      --users "$users" --requests-per-user $((2 * per)) --input-tokens 32 --output-tokens 16 "${extra[@]}")
    python3 -c "print(f'{($b - $a) / ($n // $users * $users):.0f}')"
    ;;
  agent)
    local agents=16 turns=8
    local k=$((n / (agents * turns)))
    [ "$k" -ge 1 ] || k=1
    a=$(instructions "$bin_dir/batchbench-agent" --host "$url" --tokenizer-model "$tok" --client-threads 1 \
      --agents $((agents * k)) --max-active-agents "$agents" --tool-invocations "$turns" \
      --input-tokens 256 --environment-tokens 64 --output-tokens 16 --seed 7)
    b=$(instructions "$bin_dir/batchbench-agent" --host "$url" --tokenizer-model "$tok" --client-threads 1 \
      --agents $((2 * agents * k)) --max-active-agents "$agents" --tool-invocations "$turns" \
      --input-tokens 256 --environment-tokens 64 --output-tokens 16 --seed 7)
    python3 -c "print(f'{($b - $a) / ($agents * $k * $turns):.0f}')"
    ;;
  esac
}

# Warm the word-table cache (what every run after a user's first sees).
"${dirs[0]}/batchbench" --host "$url" --model "$tok" --users 1 --requests-per-user 1 --quiet >/dev/null

printf '%-8s' "shape"
for d in "${dirs[@]}"; do printf '  %-28s' "$(basename "$(dirname "$d")")/$(basename "$d")"; done
[ ${#dirs[@]} -eq 2 ] && printf '  %s' "ratio"
printf '\n'
for shape in json stream agent; do
  printf '%-8s' "$shape"
  vals=()
  for d in "${dirs[@]}"; do
    v=$(per_request "$d" "$shape")
    vals+=("$v")
    printf '  %-28s' "$v instructions/request"
  done
  if [ ${#dirs[@]} -eq 2 ]; then
    python3 -c "print(f'  {${vals[1]} / ${vals[0]}:.4f}')"
  else
    printf '\n'
  fi
done
echo "(N = $n requests and 2N; callgrind, one client thread, the simulator outside valgrind)"
