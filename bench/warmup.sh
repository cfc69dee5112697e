#!/usr/bin/env bash
# --warmup auto against what the run's own records say.
#
# 1. A cold prefix cache: an agent workload (conversations of 11 turns, 400
#    tokens added a turn, 300 ms of tool time between turns, 10 starting a
#    second) against batchbench-sim with a prefix cache. Every conversation
#    starts on its first turn, so the server-reported hit share (cached over
#    prompt tokens) rises for about a conversation's lifetime. From the run's
#    records, the script finds when the share first reaches 95% of its final
#    value (its share over the second half of the run; one-second spans
#    stepped by 0.25 s, the span's centre) and prints the cut beside it: the
#    target is within 20%.
# 2. A run steady from the start: Poisson arrivals against a simulator
#    without batching (each request's latency its own). The target is that
#    nothing is cut.
#
#   bash bench/warmup.sh                  # release build, 10 seeds of each, 30 s runs
#   BENCH_SMOKE=1 bash bench/warmup.sh    # dev build, one seed of each: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then seeds="1"; secs=12; steady_secs=5
else seeds="1 2 3 4 5 6 7 8 9 10"; secs=30; steady_secs=20; fi
build batchbench batchbench-agent
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== a cold prefix cache: agent conversations, ${secs} s runs"
printf '%-6s %10s %14s %8s %10s %s\n' seed "cut (s)" "95% at (s)" ratio "left out" "set by"
for seed in $seeds; do
  "$target/batchbench-agent" \
    --host "sim://?prefill-us-per-token=40&decode-ms-per-token=1&ttft-base-ms=2" \
    --tokenizer-model "$tok" --input-tokens 200 --environment-tokens 400 \
    --tool-invocations 10 --tool-call-latency-ms 300 --output-tokens 20 \
    --session-rate 10 --duration-secs "$secs" --warmup auto --stream --seed "$seed" \
    --quiet --summary-json "$work/s.json" --requests-jsonl "$work/r.jsonl" >/dev/null
  python3 - "$seed" "$work/s.json" "$work/r.jsonl" <<'PY'
import json, sys
seed, summary, lines = sys.argv[1:]
s = json.load(open(summary))["summary"]["load"]["steady"]
ok = [
    (l["intended_ms"] / 1000, l["server_cached_tokens"] or 0, l["prompt_tokens"] or 0)
    for l in map(json.loads, open(lines))
    if l["ok"]
]
end = max(r[0] for r in ok)
def share(a, b):
    c = sum(r[1] for r in ok if a <= r[0] < b)
    p = sum(r[2] for r in ok if a <= r[0] < b)
    return c / max(p, 1)
final = share(end / 2, end)
t = 0.0
while t + 1 < end and share(t, t + 1) < 0.95 * final:
    t += 0.25
settles = t + 0.5
cut = s["from_secs"]
ratio = cut / settles
mark = "" if abs(ratio - 1) <= 0.2 else "  <- outside 20%"
print(f"{seed:<6} {cut:>10.2f} {settles:>14.2f} {ratio:>8.2f} {s['cut_requests']:>10} {s.get('set_by')}{mark}")
PY
done

echo
echo "== steady from the start: 100 requests/s (Poisson), no batching, ${steady_secs} s runs"
printf '%-6s %10s %10s %s\n' seed "cut (s)" "left out" "series (steady mean)"
for seed in $seeds; do
  "$target/batchbench" --host "sim://?ttft-base-ms=2&decode-ms-per-token=0.5" \
    --tokenizer-model "$tok" --input-tokens 32 --output-lognorm-median 64 \
    --output-lognorm-sigma 0.6 --request-rate 100 --arrival poisson \
    --duration-secs "$steady_secs" --warmup auto --stream --seed "$seed" \
    --quiet --summary-json "$work/s.json" >/dev/null
  python3 - "$seed" "$work/s.json" <<'PY'
import json, sys
seed, summary = sys.argv[1:]
s = json.load(open(summary))["summary"]["load"]["steady"]
series = ", ".join(f"{x['name']} {x['steady_mean']:.2f} {x['unit']}" for x in s["series"])
mark = "" if s["from_secs"] == 0 else "  <- cut"
print(f"{seed:<6} {s['from_secs']:>10.2f} {s['cut_requests']:>10} {series}{mark}")
PY
done
