#!/usr/bin/env bash
# Calibrates the client-bound verdict (`summary.client_bound`): a run well
# under the client's ceiling must never get it, a run past it always. Against
# an instant server in its own process (the simulator with `--instant`, or
# nginx with BENCH_SERVER=nginx), exact 32-token prompts with the Qwen
# tokenizer, one client thread, constant arrivals. Prints, from one run:
#
#   1. one client thread's ceiling: the highest rate it sends (achieved within
#      1%, no arrival dropped at the deadline, nothing failed), found by
#      doubling, then bisecting (bench/load.sh's ceiling asks a send lag p99
#      of 1 ms at most too, a lower rate: the schedule's precision, not what
#      the thread can send);
#   2. N runs at 50% of it and N at 150% (N=20; BENCH_RUNS): how many were
#      client-bound, for which reasons, and the figures the verdict reads
#      (the threads' busy share, the scheduling delay, the send lag, the
#      arrivals dropped) (target: 0 of N at 50%, N of N at 150%);
#   3. a capacity search over the request rate from 50% of the ceiling, with
#      an SLO the instant server always meets: it must end `client_bound`
#      rather than report the client's ceiling as the server's capacity.
#
#   bash bench/client-bound.sh                  # release build, 3 s runs
#   BENCH_SMOKE=1 bash bench/client-bound.sh    # dev build, 2 runs each: proves the script runs
#   BENCH_RUNS=5 BENCH_SECS=5 bash bench/client-bound.sh
#   BENCH_SERVER=nginx bash bench/client-bound.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then runs=2; secs=1
else runs="${BENCH_RUNS:-20}"; secs="${BENCH_SECS:-3}"; fi
build batchbench batchbench-sim
start_server --instant
trap stop_sim EXIT

python3 - "$target" "$tok" "$port" "$secs" "$runs" "$smoke" <<'PY'
import json, os, statistics, subprocess, sys, tempfile

target, tok, port, secs, runs, smoke = sys.argv[1:7]
secs, runs = float(secs), int(runs)
cores = os.cpu_count() or 1
host = f"http://127.0.0.1:{port}"
common = ["--host", host, "--tokenizer-model", tok, "--input-tokens", "32", "--output-tokens", "16",
          "--users", "64", "--client-threads", "1", "--arrival", "constant", "--quiet"]

def run(rate, seconds=secs):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        subprocess.run([os.path.join(target, "batchbench")] + common +
                       ["--request-rate", str(rate), "--duration-secs", str(seconds), "--summary-json", out],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(out))["summary"]

# 1. The ceiling of one client thread: what it sends, on schedule or late.
def sustains(rate):
    s = run(rate, 1 if smoke else min(secs, 4.0))
    load = s["load"]
    return (not s["failed_requests"] and abs(load["achieved_rate"] - rate) <= 0.01 * rate
            and not load.get("dropped_arrivals"))

lo, hi = 0.0, 2000.0
while sustains(hi) and not smoke:
    lo, hi = hi, hi * 2
for _ in range(0 if smoke else 4):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if sustains(mid) else (lo, mid)
ceiling = lo or hi / 2
server = os.environ.get("BENCH_SERVER", "sim").replace("sim", "the simulator")
print(f"one client thread's ceiling: {ceiling:,.0f} requests/s ({cores} cores, {server} in its own process on the same machine)")

# 2. Under and past it.
def fmt(xs, unit=""):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}{unit}"

def level(share, want_bound):
    rate = round(ceiling * share)
    bound, reasons, busy, sched, lag, dropped = 0, {}, [], [], [], []
    for _ in range(runs):
        s = run(rate)
        b = s.get("client_bound")
        if b:
            bound += 1
            for r in b["reasons"]:
                reasons[r] = reasons.get(r, 0) + 1
        c = s.get("client") or {}
        busy.append(c.get("busy_share"))
        sched.append((c.get("scheduling_delay") or {}).get("p99_ms"))
        lag.append((s["load"].get("send_lag") or {}).get("p99_ms"))
        dropped.append(s["load"].get("dropped_arrivals", 0))
    ok = bound == (runs if want_bound else 0)
    why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"
    print(f"  {share * 100:.0f}% of the ceiling ({rate:,}/s), {runs} runs of {secs:g} s: client-bound in {bound} "
          f"(target {runs if want_bound else 0}: {'met' if ok else 'NOT met'}); reasons: {why}")
    print(f"      min/median/max: busy share {fmt(busy)}, scheduling delay p99 {fmt(sched, ' ms')}, "
          f"send lag p99 {fmt(lag, ' ms')}, dropped arrivals {fmt(dropped)}")

print("the verdict at 50% and 150% of that ceiling:")
level(0.5, False)
level(1.5, True)

# 3. A capacity search whose client is the bottleneck.
with tempfile.TemporaryDirectory() as d:
    start = max(round(ceiling / 2), 1)
    subprocess.run([os.path.join(target, "batchbench"), "capacity"] + common +
                   ["--over", "request-rate", "--start", str(start), "--duration-secs", str(secs),
                    "--slo", "e2e<=10s", "--max-points", "6", "--output-dir", os.path.join(d, "s")],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cap = json.load(open(os.path.join(d, "s", "index.json")))["capacity"]
    print(f"capacity search from {start:,}/s with an SLO the server always meets: verdict {cap['verdict']} "
          f"(target client_bound: {'met' if cap['verdict'] == 'client_bound' else 'NOT met'})")
    print(f"  {cap['message']}")
PY
