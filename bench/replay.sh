#!/usr/bin/env bash
# Replay at scale: a generated v2 manifest of 100,000 trajectories and 2,000,000
# requests (peak RSS of a dry run; time from launch to the first request of a real
# run), and open-loop admission lag p99 at 1,000 and 10,000 admissions per second
# against the zero-latency simulator.
#
#   bash bench/replay.sh                 # release build, full sizes (the manifest is ~1.1 GB, cached)
#   BENCH_SMOKE=1 bash bench/replay.sh   # dev build, tiny sizes
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then trajs=200; per=20; lag_n1=200; lag_n2=400
else trajs=100000; per=20; lag_n1=5000; lag_n2=20000; fi
ensure_tools
build batchbench-agent batchbench-sim
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/bench"
mkdir -p "$cache"
big="$cache/replay-$trajs-$per.jsonl"
if [ ! -s "$big" ]; then
  python3 bench/gen_manifest.py "$big.part" "$trajs" "$per"
  mv "$big.part" "$big"
fi
start_sim
trap stop_sim EXIT
agent() { "$target/batchbench-agent" --host "http://127.0.0.1:$port" --tokenizer-model "$tok" "$@"; }

echo "manifest: $trajs trajectories x $per requests, $(python3 -c "import os; print(f'{os.path.getsize(\"$big\")/1e6:.0f}')") MB"
python3 - "$target/batchbench-agent" "$big" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
subprocess.run([sys.argv[1], "--agent-plans-jsonl", sys.argv[2], "--dry-run"], check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"dry run: {time.monotonic() - t:.1f} s, peak RSS {ru.ru_maxrss / 1024:.0f} MB (target: under 1 GB)")
PY

# Time to first request: launch a real run against a listening socket that blocks
# (using no CPU) until the first request's bytes arrive; polling a counter would take
# a share of the two cores the run is timed on. Three runs; the median is printed.
python3 - "$target/batchbench-agent" "$tok" "$big" <<'PY'
import select, signal, socket, statistics, subprocess, sys, time
exe, tok, manifest = sys.argv[1:]
times = []
for _ in range(3):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1024)
    port = srv.getsockname()[1]
    t = time.monotonic()
    p = subprocess.Popen([exe, "--host", f"http://127.0.0.1:{port}", "--tokenizer-model", tok,
                          "--agent-plans-jsonl", manifest, "--admission", "open-loop", "-q",
                          "--request-timeout-secs", "5"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conns, got = [srv], None
    while got is None:
        ready, _, _ = select.select(conns, [], [], 30)
        if not ready:
            sys.exit("no request within 30 s")
        for s in ready:
            if s is srv:
                conns.append(srv.accept()[0])
            elif s.recv(1):
                got = time.monotonic()
                break
    times.append(got - t)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    for s in conns:
        s.close()
print(f"time to first request (load, validate, prepare the first prompts): median {statistics.median(times):.2f} s of {', '.join(f'{x:.2f}' for x in times)} (target: under 2 s)")
PY

# Open-loop admission lag: one-request trajectories spaced 1 ms and 0.1 ms apart.
lag() { # N SPACING_MS
  local m="$cache/lag-$1-$2.jsonl" s
  python3 - "$m" "$1" "$2" <<'PY'
import json, sys
out, n, spacing = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(out, "w") as f:
    for t in range(n):
        f.write(json.dumps({"schema_version": 2, "trajectory_id": f"t{t}", "start_after_ms": round(t * spacing, 3),
            "requests": [{"prompt_tokens": 32, "output_tokens": 4, "overhead_tokens": 12,
                          "blocks": [{"seed": f"u{t}", "tokens": 20, "role": "user"}]}]}) + "\n")
PY
  s=$(mktemp --suffix=.json)
  agent --agent-plans-jsonl "$m" --admission open-loop -q --summary-json "$s" >/dev/null
  python3 - "$s" "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
lag, n, spacing = s["admission_lag"], int(sys.argv[2]), float(sys.argv[3])
assert s["successful_requests"] == n, s["failures_by_kind"]
print(f"open-loop admission lag at {1000 / spacing:.0f}/s ({n} admissions): p50 {lag['p50_ms']:.3f} ms, "
      f"p99 {lag['p99_ms']:.3f} ms, max {lag['max_ms']:.3f} ms (target at 1000/s: p99 under 2 ms)")
PY
  rm -f "$s"
}
lag "$lag_n1" 1
lag "$lag_n2" 0.1
