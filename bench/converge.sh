#!/usr/bin/env bash
# --target-ci against what the binomial predicts, and against a server that
# slows down.
#
# 1. A steady server (batchbench-sim without batching: each request's latency is
#    its own, 2 ms + 0.5 ms per output token, output lengths log-normal) at a
#    Poisson rate, with --target-ci T for each T. The watched figures are e2e p50
#    and p99. From the run's own requests, the script estimates the density at
#    each quantile and prints the requests the binomial interval needs for ±T%:
#    n = (z sqrt(p (1 - p)) / (T% x_p f(x_p)))^2, where x_p is the quantile and
#    f its density (from the spread of the quantiles around it). The run's stop
#    is printed beside the larger of the two, as a ratio.
# 2. An overloaded server (a continuous-batching simulator at 1.4 times its
#    capacity, its queue growing for the whole run) with the same target: it must
#    not claim convergence, and the reason is printed.
#
#   bash bench/converge.sh                  # release build
#   BENCH_SMOKE=1 bash bench/converge.sh    # dev build, loose targets: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then targets="10"; rate=200; cap=20; overload_secs=4
else targets="5 2"; rate=1000; cap=300; overload_secs=20; fi
build batchbench batchbench-sim
start_sim --ttft-base-ms 2 --decode-ms-per-token 0.5
trap 'stop_sim' EXIT
work=$(mktemp -d)

echo "== steady server: $rate requests/s (Poisson), output tokens log-normal (median 64, sigma 0.6), cap ${cap} s"
printf '%-8s %10s %10s %12s %12s %8s %s\n' target converged requests "p50 needs" "p99 needs" ratio "figures at the stop"
for t in $targets; do
  "$target/batchbench" --host "http://127.0.0.1:$port" --tokenizer-model "$tok" \
    --input-tokens 32 --output-lognorm-median 64 --output-lognorm-sigma 0.6 \
    --output-lognorm-max 512 --request-rate "$rate" --arrival poisson \
    --duration-secs "$cap" --target-ci "$t" --seed 11 --quiet \
    --summary-json "$work/s-$t.json" --requests-jsonl "$work/r-$t.jsonl" >/dev/null
  python3 - "$t" "$work/s-$t.json" "$work/r-$t.jsonl" <<'PY'
import json, math, sys
t, summary, lines = float(sys.argv[1]) / 100, sys.argv[2], sys.argv[3]
c = json.load(open(summary))["summary"]["load"]["convergence"]
xs = sorted(
    l["latency_from_intended_ms"]
    for l in map(json.loads, open(lines))
    if l["ok"] and not l.get("warmup")
)
n = len(xs)
q = lambda p: xs[min(n - 1, max(0, int(p * n)))]
z = 1.959964
def needs(p, h):
    x = q(p)
    density = 2 * h / (q(p + h) - q(p - h))
    return (z * math.sqrt(p * (1 - p)) / (t * x * density)) ** 2
p50, p99 = needs(0.5, 0.01), needs(0.99, 0.002)
figures = ", ".join(
    f"{f['name']} {f['value_ms']:.2f} ±{f['half_width_pct']:.2f}%"
    for f in c["figures"] if f.get("half_width_pct") is not None
)
ratio = c["requests"] / max(p50, p99)
print(f"{t*100:<7.0f}% {str(c['converged']):>10} {c['requests']:>10} {p50:>12.0f} {p99:>12.0f} {ratio:>8.2f} {figures}")
PY
done
stop_sim

echo
echo "== overloaded server: 155 requests/s against a capacity of 111, ${overload_secs} s"
start_sim --max-running 8 --step-base-ms 4 --step-ms-per-seq 0.4
"$target/batchbench" --host "http://127.0.0.1:$port" --tokenizer-model "$tok" \
  --input-tokens 16 --output-tokens 10 --request-rate 155 --arrival constant \
  --duration-secs "$overload_secs" --target-ci "${targets##* }" --at-deadline cancel \
  --seed 11 --quiet --summary-json "$work/over.json" >/dev/null
python3 - "$work/over.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["summary"]["load"]["convergence"]
print(f"converged: {c['converged']} after {c['requests']} requests")
print(f"why not:   {c['reason']}")
print("verdict:  ", "met (no convergence claimed)" if not c["converged"] else "NOT met (it claimed convergence)")
PY
rm -rf "$work"
