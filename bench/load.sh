#!/usr/bin/env bash
# Open-loop pacing: achieved rate and send lag of `batchbench --request-rate` at
# 1,000 and 10,000 requests/s, and of `batchbench-agent --session-rate` at the
# same session-start rates, each over 60 s against the zero-latency simulator
# (batchbench-sim in its own process), exact 32-token prompts with the Qwen
# tokenizer. Constant arrivals, so that the achieved rate has one right answer.
# The figures come from the run's own --summary-json (`summary.load`); CPU from
# getrusage.
#
#   bash bench/load.sh                 # release build, 60 s per point
#   BENCH_SMOKE=1 bash bench/load.sh   # dev build, 2 s per point: proves the script runs
#   BENCH_SECS=20 bash bench/load.sh   # shorter points
#   BENCH_RATES=1000 bash bench/load.sh  # only some rates
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then secs=2; rates="100 1000"
else secs="${BENCH_SECS:-60}"; rates="${BENCH_RATES:-1000 10000}"; fi
build batchbench batchbench-agent batchbench-sim
start_sim
trap stop_sim EXIT

point() { # label target_rate CMD...
  python3 - "$@" <<'PY'
import json, os, resource, subprocess, sys, tempfile, time
label, rate, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
with tempfile.TemporaryDirectory() as d:
    summary = os.path.join(d, "s.json")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(cmd + ["--quiet", "--summary-json", summary], check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = json.load(open(summary))["summary"]
load = s["load"]
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
lag = load["send_lag"] or {}
err = 100 * (load["achieved_rate"] - rate) / rate
failed = s["failed_requests"]
lag_target_us = 100 if rate <= 1000 else 1000
met = lambda ok: "met" if ok else "NOT met"
print(f"{label}: target {rate:.0f}/s, achieved {load['achieved_rate']:.1f}/s ({err:+.2f}%; within 1%: {met(abs(err) <= 1)}), "
      f"{load['arrivals']} arrivals; send lag p50 {lag.get('p50_ms', 0) * 1000:.0f} us, "
      f"p99 {lag.get('p99_ms', 0) * 1000:.0f} us (at most {lag_target_us} us: {met(lag.get('p99_ms', 0) * 1000 <= lag_target_us)}), max {lag.get('max_ms', 0):.2f} ms; "
      f"{load['late_sends']} sent over 1 ms late; {failed} failed; client CPU {cpu:.1f} s over {wall:.1f} s wall")
if load.get("verdict"):
    print(f"  note: {load['verdict']}")
PY
}

for rate in $rates; do
  # Enough users that a closed loop would never be the limit; the run ends at
  # the duration, and requests in flight finish.
  point "batchbench --request-rate $rate" "$rate" "$target/batchbench" --host "http://127.0.0.1:$port" \
    --tokenizer-model "$tok" --users 64 --input-tokens 32 --output-tokens 16 \
    --request-rate "$rate" --arrival constant --duration-secs "$secs"
done
echo "(targets: send lag p99 at most 100 us at 1,000/s and at most 1 ms at 10,000/s)"

for rate in $rates; do
  # One-turn agents: each session start is one request.
  point "batchbench-agent --session-rate $rate" "$rate" "$target/batchbench-agent" --host "http://127.0.0.1:$port" \
    --tokenizer-model "$tok" --tool-invocations 1 --input-tokens 32 --output-tokens 16 \
    --session-rate "$rate" --arrival constant --duration-secs "$secs" --disable-user-tagging
done
