# Helpers shared by the benchmark scripts (sourced, not run).
# Sets: profile/dir from BENCH_SMOKE, target, tok; provides start_sim, cpu_of.

smoke="${BENCH_SMOKE:-}"
if [ -n "$smoke" ]; then
  profile=dev; dir=debug
  echo "(smoke run of $(basename "$0"): tiny sizes in a debug build, to prove the script works; the figures are noise)"
else
  profile=release; dir=release
fi

ensure_tools() {
  if ! command -v wrk >/dev/null || [ ! -x /usr/bin/time ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      (apt-get update -qq && apt-get install -y -qq wrk time) >/dev/null 2>&1 || true
    fi
  fi
  [ -x /usr/bin/time ] || { echo "/usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
}

build() { # packages...
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  cargo build --quiet --profile "$profile" "${args[@]}"
  target="${CARGO_TARGET_DIR:-target}/$dir"
  tok="$(examples/fetch-tokenizers.sh)/qwen/tokenizer.json"
}

# Starts batchbench-sim (zero latency) on a free port; sets $port and $sim_pid.
start_sim() {
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  sim_log=$(mktemp)
  "$target/batchbench-sim" --port "$port" --tokenizer-model "$tok" "$@" 2>"$sim_log" &
  sim_pid=$!
  for _ in $(seq 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health')" 2>/dev/null && break
    sleep 0.1
  done
  kill -0 "$sim_pid" 2>/dev/null || { cat "$sim_log" >&2; echo "the simulator did not start" >&2; exit 1; }
}

stop_sim() { kill "$sim_pid" 2>/dev/null || true; }

# cpu_of EXPECTED_REQUESTS CMD...: runs CMD with --summary-json, checks every
# request succeeded, prints "wall cpu_seconds maxrss_kb user_seconds sys_seconds"
# (from getrusage with microsecond precision, not /usr/bin/time's 10 ms steps).
# BENCH_REPS=N runs it N times and reports the run with the least CPU: the machine
# may be shared, and interference only ever adds.
cpu_of() {
  local expect=$1; shift
  python3 - "$expect" "$@" <<'PY'
import json, os, resource, subprocess, sys, tempfile, time
expect, cmd = int(sys.argv[1]), sys.argv[2:]
best = None
for _ in range(int(os.environ.get("BENCH_REPS", "1"))):
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "s.json")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.monotonic()
        subprocess.run(cmd + ["--quiet", "--summary-json", summary], check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        s = json.load(open(summary))["summary"]
    if s["successful_requests"] != expect or s["failed_requests"]:
        sys.exit(f"bench invalid: {s['successful_requests']} of {expect} requests succeeded: {s['failures_by_kind']}")
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    run = (user + system, wall, after.ru_maxrss, user, system)
    best = run if best is None or run < best else best
cpu, wall, rss, user, system = best
print(f"{wall:.3f} {cpu:.6f} {rss} {user:.6f} {system:.6f}")
PY
}

per_request_us() { python3 -c "print(f'{($1)/($2)*1e6:.1f}')"; }
