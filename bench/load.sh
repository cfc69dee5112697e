#!/usr/bin/env bash
# Open-loop load: what `--request-rate` and `--session-rate` cost the client,
# and how precisely they send. Against an instant simulator in its own process
# (`batchbench-sim --instant`: no tokenization, no latency), exact 32-token
# prompts with the Qwen tokenizer, constant arrivals (so that the achieved rate
# has one right answer). Prints, from one run of the script:
#
#   1. the closed-loop CPU per request (64 users), the reference, and the floor
#      of open-loop sending on this machine (bench/pace-floor.c);
#   2. each open-loop rate: achieved rate, send lag, and CPU per request beside
#      the closed-loop figure and the floor (target: at most 2x the closed loop; send lag p99 at most 100 us
#      at 1,000/s and 1 ms at 10,000/s);
#   3. a run at 1 request/s: its CPU as a share of one core (target: under 1%);
#   4. the one-process ceiling for 1, 2, 4... client threads up to the cores
#      present (target: N threads give at least 0.75 N times one thread's);
#   5. on 16 cores or more, 250,000 requests/s with --client-threads auto
#      (target: achieved within 1%, send lag p99 at most 1 ms).
#
# The figures come from each run's own --summary-json (`summary.load`); CPU
# from getrusage. The simulator shares the machine: on few cores the ceiling
# is the pair's, and the script says so.
#
#   bash bench/load.sh                   # release build, 20 s per point
#   BENCH_SMOKE=1 bash bench/load.sh     # dev build, 1 s points: proves the script runs
#   BENCH_SECS=60 bash bench/load.sh     # longer points
#   BENCH_RATES=1000 bash bench/load.sh  # only some rates
#   BENCH_SERVER=nginx bash bench/load.sh   # against nginx (a fixed body), not the simulator
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then secs=1; rates="100 1000"
else secs="${BENCH_SECS:-20}"; rates="${BENCH_RATES:-1000 10000}"; fi
build batchbench batchbench-agent batchbench-sim
start_server --instant
trap stop_sim EXIT

python3 - "$target" "$tok" "$port" "$secs" "$smoke" $rates <<'PY'
import json, os, resource, shutil, subprocess, sys, tempfile, time

target, tok, port, secs, smoke = sys.argv[1:6]
secs, rates = float(secs), [float(r) for r in sys.argv[6:]]
cores = os.cpu_count() or 1
host = f"http://127.0.0.1:{port}"
common = ["--host", host, "--tokenizer-model", tok, "--input-tokens", "32", "--output-tokens", "16"]

def run(binary, args, strict=True):
    """Runs one point; returns (summary, cpu seconds, wall seconds). Strict:
    a failed request makes the whole bench invalid."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.monotonic()
        subprocess.run([os.path.join(target, binary)] + common + args + ["--quiet", "--summary-json", out],
                       check=True, stdout=subprocess.DEVNULL, stderr=None if strict else subprocess.DEVNULL)
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        s = json.load(open(out))["summary"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if strict and s["failed_requests"]:
        sys.exit(f"bench invalid: {s['failed_requests']} requests failed: {binary} {' '.join(args)}")
    return s, cpu, wall

def open_point(binary, rate, extra, seconds=secs, strict=True):
    return run(binary, ["--arrival", "constant", "--duration-secs", str(seconds)] + extra +
               (["--request-rate", str(rate)] if binary == "batchbench" else ["--session-rate", str(rate)]), strict)

met = lambda ok: "met" if ok else "NOT met"

# What starting costs (loading the tokenizer, building the workload): a
# one-request run, the least of three; taken off every point's CPU, so that
# short points compare with long ones.
startups = {
    "batchbench": ["--users", "1", "--requests-per-user", "1"],
    "batchbench-agent": ["--agents", "1", "--tool-invocations", "1", "--disable-user-tagging"],
}
startups = {b: min(run(b, args)[1] for _ in range(3)) for b, args in startups.items()}
startup = startups["batchbench"]
print("start-up (a one-request run, the least of three), taken off every figure below: "
      + ", ".join(f"{b} {cpu * 1000:.0f} ms of CPU" for b, cpu in startups.items()))
us = lambda cpu, n, binary="batchbench": max(cpu - startups[binary], 0.0) / max(n, 1) * 1e6

# 1. The closed loop, the reference of this run: as many requests as the
# largest open-loop point sends, from 64 users.
per_user = max(1, int(max(rates) * secs / 64))
s, cpu, wall = run("batchbench", ["--users", "64", "--requests-per-user", str(per_user)])
n = s["successful_requests"]
closed = us(cpu, n)
print(f"closed loop (64 users x {per_user}): {n} requests in {wall:.1f} s, client CPU {cpu:.2f} s: {closed:.1f} us per request")

# The floor of open-loop sending on this machine: a minimal C client (blocking
# I/O, one connection, nothing else) pacing one request at a time with a body
# of the same size. Requests that do not overlap cost it two wake-ups each, as
# they cost any client: the figure says how much of the open loop's CPU is the
# kernel's, not ours.
floor = {}
cc = shutil.which("cc")
if cc:
    exe = os.path.join(tempfile.mkdtemp(), "pace-floor")
    subprocess.run([cc, "-O2", "-o", exe, "bench/pace-floor.c"], check=True)
    body = json.dumps({"model": "batchbench-sim", "max_tokens": 16, "messages": [{"role": "user", "content": " ".join(["word"] * 32)}]})
    for rate in rates:
        out = subprocess.run([exe, port, str(rate), str(min(secs, 5.0)), body], check=True, capture_output=True, text=True).stdout.split()
        floor[rate] = float(out[1]) / int(out[0]) * 1e6
        print(f"floor at {rate:.0f}/s (bench/pace-floor.c: one connection, blocking I/O, no work per request): {floor[rate]:.1f} us per request, {floor[rate] / closed:.2f}x the closed loop")
else:
    print("(no C compiler: the floor of open-loop sending is not measured)")

# 2. Open loop at each rate, both release modes.
for binary, label, extra in [
    ("batchbench", "batchbench --request-rate", ["--users", "64"]),
    # One-turn agents: each session start is one request.
    ("batchbench-agent", "batchbench-agent --session-rate", ["--tool-invocations", "1", "--disable-user-tagging"]),
]:
    for rate in rates:
        s, cpu, wall = open_point(binary, rate, extra)
        load = s["load"]
        lag = load["send_lag"] or {}
        err = 100 * (load["achieved_rate"] - rate) / rate
        n = s["successful_requests"]
        per = us(cpu, n, binary)
        lag_target = 100 if rate <= 1000 else 1000
        p99 = lag.get("p99_ms", 0) * 1000
        print(f"{label} {rate:.0f}: achieved {load['achieved_rate']:.1f}/s ({err:+.2f}%; within 1%: {met(abs(err) <= 1)}); "
              f"send lag p50 {lag.get('p50_ms', 0) * 1000:.0f} us, p99 {p99:.0f} us (at most {lag_target} us: {met(p99 <= lag_target)}), "
              f"max {lag.get('max_ms', 0):.2f} ms, {load['late_sends']} over 1 ms late; "
              f"client CPU {cpu:.2f} s for {n} requests: {per:.1f} us per request, {per / closed:.2f}x the closed loop (at most 2x: {met(per <= 2 * closed)})"
              + (f", {per / floor[rate]:.2f}x the floor" if rate in floor else ""))

# 3. An idle pacer: one request a second.
idle_secs = 3 if smoke else max(10.0, secs)
s, cpu, wall = open_point("batchbench", 1, ["--users", "1"], idle_secs)
busy = max(cpu - startup, 0.0)
print(f"batchbench --request-rate 1 for {idle_secs:.0f} s: client CPU {busy:.3f} s after start-up, {100 * busy / wall:.2f}% of one core (under 1%: {met(busy / wall < 0.01)})")

# 4. The ceiling: the highest rate a thread count sustains (achieved within
# 1%, send lag p99 at most 1 ms, nothing failed), found by doubling, then
# bisecting.
ceiling_secs = 1 if smoke else min(secs, 4.0)

def sustains(rate, t):
    try:
        s, cpu, wall = open_point("batchbench", rate, ["--users", "64", "--client-threads", str(t)], ceiling_secs, strict=False)
    except subprocess.CalledProcessError:
        return False, 0.0
    load = s["load"]
    ok = (not s["failed_requests"] and abs(load["achieved_rate"] - rate) <= 0.01 * rate
          and ((load["send_lag"] or {}).get("p99_ms", 0) <= 1))
    return ok, us(cpu, s["successful_requests"])

def ceiling(t):
    lo, lo_us, hi = 0.0, 0.0, 5000.0 * t
    while True:
        ok, per = sustains(hi, t)
        if not ok:
            break
        lo, lo_us, hi = hi, per, hi * 2
        if smoke:
            return lo, lo_us
    for _ in range(1 if smoke else 4):
        mid = (lo + hi) / 2
        ok, per = sustains(mid, t)
        if ok:
            lo, lo_us = mid, per
        else:
            hi = mid
    return lo, lo_us

threads, t = [], 1
while t <= cores:
    threads.append(t)
    t *= 2
if threads[-1] != cores:
    threads.append(cores)
one = None
shared = "; on this few cores, the ceiling of the pair" if cores < 8 else ""
server = os.environ.get("BENCH_SERVER", "sim").replace("sim", "the simulator")
print(f"one-process ceiling, send lag p99 at most 1 ms ({cores} cores, {server} on the same machine{shared}):")
for t in threads:
    got, per = ceiling(t)
    one = one or got or 1.0
    print(f"  --client-threads {t}: {got:,.0f} requests/s ({per:.1f} us CPU per request there); "
          f"{got / one:.2f}x one thread (at least {0.75 * t:.2f}x: {met(got >= 0.75 * t * one)})")

# 5. 250,000 requests/s from one process, where the machine has the cores.
if cores >= 16:
    rate = 250_000
    s, cpu, wall = open_point("batchbench", rate, ["--users", "64", "--client-threads", "auto"])
    load = s["load"]
    err = 100 * (load["achieved_rate"] - rate) / rate
    p99 = (load["send_lag"] or {}).get("p99_ms", 0)
    print(f"batchbench --request-rate 250000 --client-threads auto: achieved {load['achieved_rate']:,.0f}/s ({err:+.2f}%; within 1%: {met(abs(err) <= 1)}), "
          f"send lag p99 {p99:.2f} ms (at most 1 ms: {met(p99 <= 1)}), client CPU {cpu:.1f} s over {wall:.1f} s")
else:
    print(f"(250,000 requests/s needs 16 cores or more; this machine has {cores}: see the ceiling above)")
PY
