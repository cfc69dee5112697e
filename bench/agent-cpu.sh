#!/usr/bin/env bash
# Client CPU per request of `batchbench-agent` against a zero-latency simulator in
# its own process, for two shapes, and its growth with the number of turns.
#
# CPU per request is marginal: the difference between two runs that differ only in
# the number of agents, divided by the difference in requests, so the one-off
# start-up (loading an 11 MB tokenizer) is not spread over the requests.
#
#   bash bench/agent-cpu.sh                 # release build
#   BENCH_SMOKE=1 bash bench/agent-cpu.sh   # dev build, tiny sizes
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then a1=2; a2=4; turns_list="4"; shape_turns=4; volume=8; active=4
else a1=8; a2=64; turns_list="8 32 128"; shape_turns=32; volume=4096; active=64; fi
ensure_tools
build batchbench-agent batchbench-sim
start_sim
trap stop_sim EXIT

if [ -n "$smoke" ]; then export BENCH_REPS=1; else export BENCH_REPS="${BENCH_REPS:-3}"; fi

# marginal INPUT ENV TURNS [A1 A2] -> "total user sys" in us per request, from runs
# of A1 and A2 agents with at most $active active at once.
marginal() {
  local input=$1 env=$2 turns=$3 x1=${4:-$a1} x2=${5:-$a2} c1 c2 u1 u2 s1 s2 n
  run() { cpu_of $(($1 * turns)) "$target/batchbench-agent" --host "http://127.0.0.1:$port" --tokenizer-model "$tok" \
    --agents "$1" --max-active-agents "$active" --tool-invocations "$turns" --input-tokens "$input" \
    --environment-tokens "$env" --output-tokens 64 --seed 1; }
  read -r _ c1 _ u1 s1 < <(run "$x1")
  read -r _ c2 _ u2 s2 < <(run "$x2")
  n=$(( (x2 - x1) * turns ))
  echo "$(per_request_us "$c2-$c1" "$n") $(per_request_us "$u2-$u1" "$n") $(per_request_us "$s2-$s1" "$n")"
}

echo "client CPU per request (marginal over $a1 -> $a2 agents, 64 output tokens, least of $BENCH_REPS runs):"
read -r tot usr sys < <(marginal 256 64 "$shape_turns")
echo "  256-token prompts, 64-token environment, $shape_turns turns: $tot us/request (user $usr, system $sys) (target: at most 170, a tenth of the 1.7 ms of the tool we replace)"
read -r tot usr sys < <(marginal 4096 512 "$shape_turns")
echo "  4096-token prompts, 512-token environment, $shape_turns turns: $tot us/request (user $usr, system $sys) (target: at most 970, a tenth of 9.7 ms)"
echo "growth with turns (256/64 shape, $volume requests in each difference, $active agents active)."
echo "Flat user time = our work per turn is proportional to what the turn adds; system time grows"
echo "with the bytes the protocol resends (the whole conversation, every turn):"
for t in $turns_list; do
  read -r tot usr sys < <(marginal 256 64 "$t" "$active" $((active + volume / t)))
  echo "  $t turns: $tot us/request (user $usr, system $sys)"
done
