#!/usr/bin/env bash
# The one-process ceiling of the open loop on a many-core host: one batchbench
# process with --client-threads auto sends constant arrivals at 50,000,
# 100,000, 200,000 and 250,000 requests/s (exact 32-token prompts with the Qwen
# tokenizer) to Debian's nginx on the same host, several workers answering a
# fixed chat completion from memory, so that the server is not what limits the
# client. Prints, per point: the rate achieved, the send lag's percentiles
# (p50, p90, p99, max), the arrivals sent and dropped at the deadline, failures,
# the client's CPU (getrusage) per request and as cores, its client-bound
# reasons, and whether the point meets the many-core target (achieved within 1%
# of the rate asked for, send lag p99 at most 1 ms). Written for a host of 16
# cores or more; on fewer it runs all the same and says that the figures are
# that host's.
#
#   bash bench/ceiling.sh                                  # release build, 10 s per point
#   BENCH_RATES="50000 100000" BENCH_SECS=20 bash bench/ceiling.sh
#   BENCH_NGINX_WORKERS=8 bash bench/ceiling.sh            # nginx's workers (default: half the cores)
#   BENCH_USERS=2048 bash bench/ceiling.sh                 # the cap on requests in flight (default 1024)
#   BENCH_SMOKE=1 bash bench/ceiling.sh                    # dev build, 2,000 and 5,000/s for 1 s: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cores=$(nproc)
if [ -n "$smoke" ]; then secs=1; rates="2000 5000"
else secs="${BENCH_SECS:-10}"; rates="${BENCH_RATES:-50000 100000 200000 250000}"; fi
workers="${BENCH_NGINX_WORKERS:-$(( cores / 2 > 0 ? cores / 2 : 1 ))}"
users="${BENCH_USERS:-1024}"
build batchbench
start_nginx json "$workers"
trap stop_sim EXIT
echo "(nginx, $workers worker process(es), on port $port; this host has $cores cores)"
[ "$cores" -ge 16 ] || echo "(the target is for 16 cores or more; on $cores the figures are this host's ceiling, client and server sharing it)"

python3 - "$target" "$tok" "$port" "$secs" "$users" $rates <<'PY'
import json, os, resource, subprocess, sys, tempfile, time

target, tok, port, secs, users = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
rates = [float(r) for r in sys.argv[6:]]

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

print(f"one process, --client-threads auto, {users} users at most in flight, constant arrivals, {secs:.0f} s a point")
for rate in rates:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        c0, t0 = child_cpu(), time.monotonic()
        # A run that falls behind exits 0 all the same; its summary says so.
        subprocess.run([os.path.join(target, "batchbench"), "--host", f"http://127.0.0.1:{port}",
                        "--tokenizer-model", tok, "--input-tokens", "32", "--output-tokens", "16",
                        "--users", users, "--client-threads", "auto",
                        "--request-rate", str(rate), "--arrival", "constant",
                        "--duration-secs", str(secs), "--quiet", "--summary-json", out],
                       check=True, stdout=subprocess.DEVNULL)
        wall, cpu = time.monotonic() - t0, child_cpu() - c0
        s = json.load(open(out))["summary"]
    load = s.get("load") or {}
    lag = load.get("send_lag") or {}
    achieved = load.get("achieved_rate", 0.0)
    sent = load.get("arrivals", 0)
    ok, failed = s["successful_requests"], s["failed_requests"]
    p99 = lag.get("p99_ms", 0.0)
    met = achieved >= 0.99 * rate and p99 <= 1.0
    bound = "+".join((s.get("client_bound") or {}).get("reasons", [])) or "no"
    print(f"{rate:>9,.0f}/s: achieved {achieved:,.1f}/s ({achieved / rate:.1%}); send lag p50 {lag.get('p50_ms', 0) * 1000:,.0f} us, "
          f"p90 {lag.get('p90_ms', 0) * 1000:,.0f} us, p99 {p99 * 1000:,.0f} us, max {lag.get('max_ms', 0):,.1f} ms")
    print(f"           {sent:,} sent, {load.get('dropped_arrivals', 0):,} dropped at the deadline, {ok:,} ok, {failed:,} failed; "
          f"ran {wall:.1f} s; client CPU {cpu:.1f} s = {cpu / max(wall, 1e-9):.1f} cores, {cpu / max(ok + failed, 1) * 1e6:.1f} us a request")
    print(f"           client-bound: {bound}; achieved within 1% and send lag p99 at most 1 ms: {'met' if met else 'NOT met'}")
PY
