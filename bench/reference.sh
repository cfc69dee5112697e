#!/usr/bin/env bash
# batchbench against the tool it replaces (batchbench==0.7.0 from PyPI, in a
# virtual environment outside the clone), in alternating rounds: each round runs
# both tools on the same closed loop (64 users, exact 32-token prompts with the
# Qwen tokenizer, 16 output tokens) against the same instant server, one after
# the other, so that a machine that gets busier or quieter over the minutes
# moves both figures of a round alike. Prints each round's client CPU per
# request (whole process, start-up included, as the reference's own figure is)
# and their ratio; the target (at most 0.1x) is met when every round meets it.
#
#   bash bench/reference.sh                        # release build, 3 rounds
#   BENCH_ROUNDS=5 bash bench/reference.sh
#   BENCH_SERVER=nginx bash bench/reference.sh     # against nginx (a fixed body), not the simulator
#   BENCH_SMOKE=1 bash bench/reference.sh          # dev build, tiny sizes: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${BENCH_ROUNDS:-3}
if [ -n "$smoke" ]; then users=8; per_user=50; rounds=1
else users=64; per_user=1000; fi
ensure_tools
ensure_reference
build batchbench batchbench-sim
start_server
trap stop_sim EXIT
n=$((users * per_user))
url="http://127.0.0.1:$port"
# The request's model field is the tokenizer path for both tools: the reference
# reads its tokenizer from --model, and the bodies stay alike.
exact=(--model "$tok" --input-tokens 32 --output-tokens 16)
# Warm the word-table cache (what every run after a user's first one sees).
cpu_of 1 "$target/batchbench" --host "$url" --users 1 --requests-per-user 1 "${exact[@]}" > /dev/null

if [ "$rounds" = 1 ]; then what="one round"; else what="$rounds alternating rounds"; fi
echo "client CPU per request, $n requests, $users users, exact 32-token prompts, $what"
ratios=()
for r in $(seq "$rounds"); do
  read -r _ cpu _ < <(cpu_of "$n" "$target/batchbench" --host "$url" --users "$users" --requests-per-user "$per_user" "${exact[@]}")
  ours=$(per_request_us "$cpu" "$n")
  read -r _ cpu _ < <(ref_cpu_of "$n" "$ref_dir/batchbench" --host "$url" --users "$users" --requests-per-user "$per_user" "${exact[@]}")
  ref=$(per_request_us "$cpu" "$n")
  ratio=$(python3 -c "print(f'{$ours / $ref:.3f}')")
  ratios+=("$ratio")
  echo "  round $r: batchbench $ours us, reference (batchbench==0.7.0) $ref us: ${ratio}x"
done
worst=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
if python3 -c "import sys; sys.exit(0 if $worst <= 0.1 else 1)"; then verdict=met; else verdict="NOT met"; fi
echo "target: at most 0.1x the reference in every round: worst ${worst}x: $verdict"
