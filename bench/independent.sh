#!/usr/bin/env bash
# The client's cost against a server that is not ours: Debian's nginx (one
# worker) answering every request from memory with a fixed chat completion,
# JSON or a stream of 16 token chunks (bench/lib.sh, start_nginx). Exact
# 32-token prompts with the Qwen tokenizer. Prints, from one run:
#
#   1. the closed loop (64 users), JSON: client CPU per request beside wrk's
#      (one thread, 64 connections, a body of the same size) against the same
#      nginx (target: at most 1.5x wrk);
#   2. the same streamed, against nginx's SSE body, beside wrk fetching the
#      same bytes (target: at most 1.5x wrk);
#   3. the open loop at 5,000 requests/s (constant), JSON: CPU per request
#      beside the minimal C pacer's (bench/pace-floor.c) against the same nginx
#      (target: at most 1.5x the pacer), with its achieved rate and send lag;
#   4. one-turn sessions at the same rate (batchbench-agent --session-rate):
#      CPU per request beside the request rate's of the same run (target: at
#      most 1.2x);
#   5. a rate far past one client thread's ceiling (400,000/s for 3 s, 256
#      users): the run's wall time against its 3 s duration, the arrivals it
#      dropped at the deadline, its load note and its client-bound reasons.
#
# CPU from getrusage of the child; each batchbench figure less the CPU of a
# one-request run (start-up: the tokenizer, the workload), the least of three.
#
#   bash bench/independent.sh                  # release build, 10 s points
#   BENCH_SMOKE=1 bash bench/independent.sh    # dev build, tiny sizes: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then per_user=20; secs=1; rate=500; past=20000
else per_user=500; secs=10; rate=5000; past=400000; fi
ensure_tools
build batchbench batchbench-agent
command -v cc >/dev/null || { echo "a C compiler is needed for bench/pace-floor.c (apt-get install gcc)" >&2; exit 1; }
floor_exe=$(mktemp)
cc -O2 -o "$floor_exe" bench/pace-floor.c
start_nginx json
json_port=$port; json_pid=$sim_pid
start_nginx sse
sse_port=$port; sse_pid=$sim_pid
trap 'kill "$json_pid" "$sse_pid" 2>/dev/null || true; rm -f "$floor_exe"' EXIT

python3 - "$target" "$tok" "$json_port" "$sse_port" "$per_user" "$secs" "$rate" "$past" "$floor_exe" <<'PY'
import json, os, random, resource, string, subprocess, sys, tempfile, time

target, tok, json_port, sse_port = sys.argv[1:5]
per_user, secs, rate, past = int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
floor_exe = sys.argv[9]
met = lambda ok: "met" if ok else "NOT met"

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def bb(port, args, strict=True, binary="batchbench"):
    """One batchbench run against nginx on `port`: (summary, cpu s, wall s)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        c0, t0 = child_cpu(), time.monotonic()
        subprocess.run([os.path.join(target, binary), "--host", f"http://127.0.0.1:{port}",
                        "--tokenizer-model", tok, "--input-tokens", "32", "--output-tokens", "16",
                        "--quiet", "--summary-json", out] + args,
                       check=strict, stdout=subprocess.DEVNULL)
        wall, cpu = time.monotonic() - t0, child_cpu() - c0
        s = json.load(open(out))["summary"]
    if strict and s["failed_requests"]:
        sys.exit(f"{s['failed_requests']} requests failed: {s.get('failures')}")
    return s, cpu, wall

def wrk(port, conns, seconds, body):
    """wrk, one thread, POSTing `body`: (requests, cpu s)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [[{body}]]\n')
        lua = f.name
    c0 = child_cpu()
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{max(1, int(seconds))}s", "-s", lua,
                          f"http://127.0.0.1:{port}/v1/chat/completions"],
                         check=True, capture_output=True, text=True).stdout
    cpu = child_cpu() - c0
    os.unlink(lua)
    n = int(next(l for l in out.splitlines() if "requests in" in l).split()[0])
    return n, cpu

# A body the size of an exact 32-token prompt (32 seven-byte words).
r = random.Random(1)
words = " ".join("".join(r.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(32))
body = json.dumps({"model": tok, "messages": [{"role": "user", "content": " " + words}], "max_tokens": 16})

startup = min(bb(json_port, ["--users", "1", "--requests-per-user", "1"])[1] for _ in range(3))
one_turn = ["--tool-invocations", "1", "--disable-user-tagging"]
agent_startup = min(bb(json_port, ["--agents", "1"] + one_turn, binary="batchbench-agent")[1] for _ in range(3))
print(f"start-up (a one-request run, the least of three): {startup * 1000:.0f} ms of CPU "
      f"(batchbench-agent {agent_startup * 1000:.0f} ms), taken off every figure of its binary")
us = lambda cpu, n, start=startup: max(cpu - start, 0.0) / max(n, 1) * 1e6

# 1 and 2. Closed loops against wrk.
for label, port, extra in [("JSON", json_port, []), ("streamed (SSE, 16 chunks)", sse_port, ["--stream"])]:
    s, cpu, wall = bb(port, ["--users", "64", "--requests-per-user", str(per_user)] + extra)
    n = s["successful_requests"]
    ours = us(cpu, n)
    wn, wcpu = wrk(port, 64, max(2.0, secs / 2), body)
    floor = wcpu / wn * 1e6
    print(f"closed loop, {label}: batchbench {n} requests in {wall:.1f} s, {ours:.1f} us of CPU per request; "
          f"wrk {wn} requests, {floor:.1f} us per request: {ours / floor:.2f}x wrk (at most 1.5x: {met(ours <= 1.5 * floor)})")

# 3. The open loop against the C pacer.
out = subprocess.run([floor_exe, json_port, str(rate), str(min(secs, 5.0)), body],
                     check=True, capture_output=True, text=True).stdout.split()
pacer = float(out[1]) / int(out[0]) * 1e6
s, cpu, wall = bb(json_port, ["--users", "64", "--request-rate", str(rate), "--arrival", "constant",
                              "--duration-secs", str(secs)])
load = s["load"]
n = s["successful_requests"]
ours = us(cpu, n)
lag = load.get("send_lag") or {}
print(f"open loop at {rate:.0f}/s, {n} requests: achieved {load['achieved_rate']:.1f}/s, send lag p50 {lag.get('p50_ms', 0) * 1000:.0f} us, "
      f"p99 {lag.get('p99_ms', 0) * 1000:.0f} us; {ours:.1f} us of CPU per request; the C pacer ({out[0]} requests) {pacer:.1f} us: "
      f"{ours / pacer:.2f}x (at most 1.5x: {met(ours <= 1.5 * pacer)})")

# 4. One-turn sessions at the same rate: each session start is one request.
s, cpu, wall = bb(json_port, ["--session-rate", str(rate), "--arrival", "constant",
                              "--duration-secs", str(secs)] + one_turn, binary="batchbench-agent")
sload = s["load"]
sn = s["successful_requests"]
sessions = us(cpu, sn, agent_startup)
slag = sload.get("send_lag") or {}
print(f"one-turn sessions at {rate:.0f}/s, {sn} requests: achieved {sload['achieved_rate']:.1f}/s, send lag p50 {slag.get('p50_ms', 0) * 1000:.0f} us, "
      f"p99 {slag.get('p99_ms', 0) * 1000:.0f} us; {sessions:.1f} us of CPU per request: {sessions / ours:.2f}x the request rate's "
      f"(at most 1.2x: {met(sessions <= 1.2 * ours)})")

# 5. Far past the ceiling: the deadline bounds the run.
s, cpu, wall = bb(json_port, ["--users", "256", "--client-threads", "1", "--request-rate", str(past),
                              "--arrival", "constant", "--duration-secs", "3"], strict=False)
load = s["load"]
print(f"{past:.0f}/s for 3 s on one client thread: ran {wall:.2f} s (the duration plus what was in flight at the deadline); "
      f"{load['arrivals']} arrivals sent, {load.get('dropped_arrivals', 0)} dropped at the deadline, "
      f"{s['successful_requests']} ok, {s['failed_requests']} failed")
print(f"  its load note: {load.get('verdict')}")
bound = s.get("client_bound") or {}
print(f"  client-bound: {'+'.join(bound.get('reasons', [])) or 'no'} (asked for: yes, dropped)")
PY
