#!/usr/bin/env bash
# How often the 95% intervals of e2e p50 and p90 contain the true quantile,
# over many seeded runs against the simulator, in three scenarios:
#   unsaturated  each request's latency its own (independent samples);
#   saturated    a continuous-batching simulator (8 slots) kept full by 32
#                users in a closed loop: a queue of 24, its latencies moving
#                together;
#   near-knee    the same simulator fed Poisson arrivals at 90% of its
#                capacity: an open queue near its knee, whose excursions last
#                about as long as a short run (the case one run cannot tell;
#                see the book's "How sure is a figure").
#
# Every run of a scenario is a replica of one random process (its own seed), so
# the true quantile of that process is the quantile of all their requests
# pooled; each run's interval, from its own requests alone, is checked against
# it. A coverage of 93-97% is what a 95% interval should give; the same
# intervals computed as if the samples were independent (the binomial ranks on
# the raw count) are printed beside, to show what batch means buy.
#
#   bash bench/coverage.sh                  # release build, 1,000 runs a scenario
#   BENCH_RUNS=200 bash bench/coverage.sh   # fewer runs (a wider band of chance)
#   BENCH_SECS=60 BENCH_SCENARIO=near-knee bash bench/coverage.sh   # longer runs, one scenario
#   BENCH_JOBS=16 bash bench/coverage.sh    # runs at a time (each is light: a few % of a core;
#                                           # on two cores the client's timing noise grows a little)
#   BENCH_SMOKE=1 bash bench/coverage.sh    # dev build, 12 runs: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then runs=12; secs=3; else runs="${BENCH_RUNS:-1000}"; secs="${BENCH_SECS:-6}"; fi
only="${BENCH_SCENARIO:-}"
case "$only" in
  ""|unsaturated|saturated|near-knee) ;;
  *) echo "BENCH_SCENARIO: unknown scenario '$only' (unsaturated, saturated, near-knee)" >&2; exit 2 ;;
esac
jobs="${BENCH_JOBS:-4}"
build batchbench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scenario() { # name host extra-flags...
  local name=$1 host=$2; shift 2
  [ -z "$only" ] || [ "$only" = "$name" ] || return 0
  echo "== $name: $runs runs of ${secs} s, $jobs at a time"
  seq 1 "$runs" | xargs -P "$jobs" -I{} sh -c '
    d="$1/$2-$3"; shift 3
    mkdir -p "$d"
    "$@" --seed "$(basename "$d" | sed "s/.*-//")" --quiet \
      --summary-json "$d/s.json" --requests-jsonl "$d/r.jsonl" >/dev/null 2>"$d/err" || cat "$d/err" >&2
  ' _ "$work" "$name" {} "$target/batchbench" --host "$host" --tokenizer-model "$tok" \
    --duration-secs "$secs" "$@"
  python3 - "$work" "$name" <<'PY'
import glob, json, math, os, sys
work, name = sys.argv[1], sys.argv[2]
runs = []
for d in sorted(glob.glob(os.path.join(work, name + "-*"))):
    try:
        s = json.load(open(os.path.join(d, "s.json")))["summary"]
    except (OSError, ValueError):
        continue
    xs = sorted(
        l["latency_from_intended_ms"]
        for l in map(json.loads, open(os.path.join(d, "r.jsonl")))
        if l["ok"]
    )
    runs.append((s["load"]["latency_from_intended"], xs))
pooled = sorted(x for _, xs in runs for x in xs)
q = lambda xs, p: xs[min(len(xs) - 1, max(0, math.ceil(p * len(xs)) - 1))]
z = 1.959964

def naive(xs, p):
    # The binomial ranks for the raw count (normal approximation).
    n = len(xs)
    sd = math.sqrt(n * p * (1 - p))
    lo = max(1, math.floor(n * p - z * sd + 0.5))
    hi = min(n, math.ceil(n * p + z * sd + 0.5))
    return xs[lo - 1], xs[hi - 1]

for fig, p in (("p50", 0.5), ("p90", 0.9)):
    truth = q(pooled, p)
    inside = naive_inside = counted = 0
    methods, eff = {}, []
    for stats, xs in runs:
        ci = (stats.get("ci") or {})
        bounds = ci.get(fig + "_ms")
        if bounds is None:
            continue
        counted += 1
        # The histogram's values are the tops of 0.1% buckets: allow them.
        inside += bounds[0] * 0.999 <= truth <= bounds[1] * 1.001
        lo, hi = naive(xs, p)
        naive_inside += lo <= truth <= hi
        methods[ci.get("method")] = methods.get(ci.get("method"), 0) + 1
        eff.append(ci.get("effective_count", 0) / max(1, stats["count"]))
    share = 100 * inside / max(1, counted)
    band = 100 * 1.96 * math.sqrt(0.95 * 0.05 / max(1, counted))
    print(f"  {fig}: true {truth:.2f} ms (from {len(pooled)} requests); "
          f"covered by {share:.1f}% of {counted} intervals (chance alone: 95 ± {band:.1f}); "
          f"taken as independent: {100 * naive_inside / max(1, counted):.1f}%; "
          f"methods {methods}; effective share of the sample, median {sorted(eff)[len(eff) // 2] if eff else 0:.2f}")
PY
}

scenario unsaturated "sim://?ttft-base-ms=2&decode-ms-per-token=0.5" \
  --arrival poisson --request-rate 200 --input-tokens 32 --output-lognorm-median 64 \
  --output-lognorm-sigma 0.6 --output-lognorm-max 512
scenario saturated "sim://?max-running=8&step-base-ms=4&step-ms-per-seq=0.4" \
  --users 32 --input-tokens 16 --output-lognorm-median 10 \
  --output-lognorm-sigma 0.6 --output-lognorm-max 64
scenario near-knee "sim://?max-running=8&step-base-ms=4&step-ms-per-seq=0.4" \
  --arrival poisson --request-rate 100 --input-tokens 16 --output-tokens 10
