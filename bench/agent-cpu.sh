#!/usr/bin/env bash
# Client CPU per request of `batchbench-agent` against a zero-latency simulator in
# its own process: the shape of 128 agents x 32 turns (256-token prompts, 64-token
# tool results) beside the tool batchbench replaces (batchbench==0.7.0 from PyPI,
# in a virtual environment outside the clone) in the same run; then two shapes'
# marginal cost and its growth with the number of turns.
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
ensure_reference
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
  read -r _ c1 _ u1 s1 _ < <(run "$x1")
  read -r _ c2 _ u2 s2 _ < <(run "$x2")
  n=$(( (x2 - x1) * turns ))
  echo "$(per_request_us "$c2-$c1" "$n") $(per_request_us "$u2-$u1" "$n") $(per_request_us "$s2-$s1" "$n")"
}

# The whole-run figure of the issue's shape, both tools, same server, same flags.
if [ -n "$smoke" ]; then agents=4; turns=4; else agents=128; turns=32; fi
shape=(--host "http://127.0.0.1:$port" --tokenizer-model "$tok" --agents "$agents" --tool-invocations "$turns"
  --input-tokens 256 --environment-tokens 64 --output-tokens 64 --seed 1)
nreq=$((agents * turns))
read -r _ c _ _ _ synth < <(cpu_of "$nreq" "$target/batchbench-agent" "${shape[@]}")
ours=$(per_request_us "$c" "$nreq")
read -r _ c _ _ _ _ < <(ref_cpu_of "$nreq" "$ref_dir/batchbench-agent" "${shape[@]}")
theirs=$(per_request_us "$c" "$nreq")
ratio=$(python3 -c "print(f'{$ours/$theirs:.3f}')")
met=$(python3 -c "print('met' if $ours <= 0.1 * $theirs else 'NOT met')")
echo "$agents agents x $turns turns, 256-token prompts, 64-token tool results, 64 output tokens ($nreq requests, whole process):"
echo "  batchbench-agent (synthesis: $synth): $ours us/request"
echo "  reference (batchbench==0.7.0): $theirs us/request"
echo "  ratio: ${ratio}x: $met (target: at most 0.1x)"

echo "client CPU per request (marginal over $a1 -> $a2 agents, 64 output tokens, least of $BENCH_REPS runs):"
read -r tot usr sys < <(marginal 256 64 "$shape_turns")
echo "  256-token prompts, 64-token environment, $shape_turns turns: $tot us/request (user $usr, system $sys)"
read -r tot usr sys < <(marginal 4096 512 "$shape_turns")
echo "  4096-token prompts, 512-token environment, $shape_turns turns: $tot us/request (user $usr, system $sys)"
echo "growth with turns (256/64 shape, $volume requests in each difference, $active agents active)."
echo "Flat user time = our work per turn is proportional to what the turn adds; system time grows"
echo "with the bytes the protocol resends (the whole conversation, every turn):"
for t in $turns_list; do
  read -r tot usr sys < <(marginal 256 64 "$t" "$active" $((active + volume / t)))
  echo "  $t turns: $tot us/request (user $usr, system $sys)"
done
