#!/usr/bin/env bash
# Client CPU per request and peak memory of `batchbench` against a zero-latency
# server on loopback (batchbench-sim in its own process), for the shape users run
# most (exact 32-token prompts with the Qwen tokenizer, 16 output tokens) and the
# fixed prompt, beside two references from the same run, against the same server:
# the tool batchbench replaces (batchbench==0.7.0 from PyPI, in a virtual
# environment outside the clone) on the exact shape, and wrk, the floor.
# Then the start-up with a warm word-table cache, and 1,000,000 exact-prompt
# requests for flat memory.
#
#   bash bench/client-cpu.sh                 # release build
#   BENCH_SMOKE=1 bash bench/client-cpu.sh   # dev build, tiny sizes: proves the script runs
#   BENCH_SERVER=nginx bash bench/client-cpu.sh   # against nginx (a fixed body), not the simulator
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then users=8; per_user=50; big_per_user=100; wrk_secs=1; starts=2
else users=64; per_user=1000; big_per_user=15625; wrk_secs=5; starts=10; fi
ensure_tools
ensure_reference
build batchbench batchbench-sim
start_server
lua=$(mktemp --suffix=.lua)
trap 'stop_sim; rm -f "$lua"' EXIT
n=$((users * per_user))
url="http://127.0.0.1:$port"
py() { python3 -c "print($1)"; }
verdict() { if python3 -c "import sys; sys.exit(0 if ($1) else 1)"; then echo "met"; else echo "NOT met"; fi; }

# The request's model field is the tokenizer path for both tools: the reference
# reads its tokenizer from --model, and the bodies stay alike.
exact=(--model "$tok" --input-tokens 32 --output-tokens 16)
bb() { cpu_of $(($1 * $2)) "$target/batchbench" --host "$url" --users "$1" --requests-per-user "$2" "${@:3}"; }

# Warm the word-table cache (what every run after a user's first one sees).
bb 1 1 "${exact[@]}" > /dev/null

echo "client CPU per request, $n requests, $users users, 16 output tokens (whole process: start-up included)"
read -r wall cpu rss _ _ synth < <(bb "$users" "$per_user" "${exact[@]}")
ex_us=$(per_request_us "$cpu" "$n"); ex_rss=$rss
echo "  batchbench, exact 32-token prompts (synthesis: $synth): ${wall}s wall, CPU ${cpu}s = ${ex_us} us/request, peak RSS $((rss/1024)) MB"
# Sharding: the same run as the whole of one shard, and as one shard of four
# (four times the users, this shard sending the same number of requests).
read -r wall cpu rss _ _ _ < <(bb "$users" "$per_user" "${exact[@]}" --seed 1 --shard 0/1)
s1_us=$(per_request_us "$cpu" "$n")
echo "  batchbench, exact prompts, --shard 0/1: ${wall}s wall, CPU ${cpu}s = ${s1_us} us/request"
read -r wall cpu rss _ _ _ < <(cpu_of "$n" "$target/batchbench" --host "$url" --users $((users * 4)) --requests-per-user "$per_user" "${exact[@]}" --seed 1 --shard 1/4)
s4_us=$(per_request_us "$cpu" "$n")
echo "  batchbench, exact prompts, shard 1/4 of $((users * 4)) users: ${wall}s wall, CPU ${cpu}s = ${s4_us} us/request"
fl_us=""
if [ "${BENCH_SERVER:-sim}" = sim ]; then
  # A fleet: the same run spread by round robin over four endpoints (four
  # zero-latency replicas of one more simulator process), against the one above.
  fleet_pid=""
  trap 'stop_sim; kill "$fleet_pid" 2>/dev/null || true; rm -f "$lua"' EXIT
  start_fleet_sim 4
  read -r wall cpu rss _ _ _ < <(cpu_of "$n" "$target/batchbench" "${fleet_hosts[@]}" --users "$users" --requests-per-user "$per_user" "${exact[@]}")
  fl_us=$(per_request_us "$cpu" "$n")
  echo "  batchbench, exact prompts, a fleet of 4 endpoints (round_robin): ${wall}s wall, CPU ${cpu}s = ${fl_us} us/request"
  kill "$fleet_pid" 2>/dev/null || true
else
  echo "  (a fleet of 4 endpoints is simulator replicas: left out against ${BENCH_SERVER})"
fi
read -r wall cpu rss _ _ _ < <(bb "$users" "$per_user" --output-tokens 16)
fx_us=$(per_request_us "$cpu" "$n")
echo "  batchbench, fixed prompt (no tokenizer): ${wall}s wall, CPU ${cpu}s = ${fx_us} us/request, peak RSS $((rss/1024)) MB"
read -r wall cpu rss _ _ _ < <(ref_cpu_of "$n" "$ref_dir/batchbench" --host "$url" --users "$users" --requests-per-user "$per_user" "${exact[@]}")
ref_us=$(per_request_us "$cpu" "$n")
echo "  reference (batchbench==0.7.0), exact 32-token prompts: ${wall}s wall, CPU ${cpu}s = ${ref_us} us/request, peak RSS $((rss/1024)) MB"

wrk_us=""
if command -v wrk >/dev/null; then
  # A body the size of an exact 32-token prompt (32 seven-byte words).
  body=$(python3 -c 'import json, random, string, sys; r = random.Random(1); w = " ".join("".join(r.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(32)); print(json.dumps({"model": sys.argv[1], "messages": [{"role": "user", "content": " " + w}], "max_tokens": 16, "min_tokens": 16}))' "$tok")
  cat > "$lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[$body]]
LUA
  wt=$(mktemp); wo=$(mktemp)
  /usr/bin/time -f '%U %S' -o "$wt" wrk -t1 -c"$users" -d"${wrk_secs}s" -s "$lua" "$url/v1/chat/completions" > "$wo"
  read -r wusr wsys < "$wt"
  wn=$(awk '/requests in/ {print $1}' "$wo")
  rm -f "$wt" "$wo"
  wrk_us=$(per_request_us "$wusr+$wsys" "$wn")
  echo "  wrk (the floor: one fixed body of the same size): $wn requests, $users connections, ${wrk_secs}s: CPU $(py "f'{$wusr+$wsys:.2f}'")s = ${wrk_us} us/request"
else
  echo "  wrk is not installed: no floor figure (apt-get install wrk)"
fi

echo "targets:"
echo "  exact prompts at most 0.1x the reference: $(py "f'{$ex_us/$ref_us:.3f}'")x ($ex_us vs $ref_us us): $(verdict "$ex_us <= 0.1 * $ref_us")"
[ -n "$wrk_us" ] && echo "  exact prompts within 2x of wrk: $(py "f'{$ex_us/$wrk_us:.2f}'")x: $(verdict "$ex_us <= 2 * $wrk_us")"
echo "  exact prompts at the cost of the fixed prompt: $(py "f'{$ex_us/$fx_us:.2f}'")x"
[ -n "$fl_us" ] && echo "  a fleet of 4 endpoints within 5% of one: $(py "f'{$fl_us/$ex_us:.3f}'")x: $(verdict "$fl_us <= 1.05 * $ex_us")"
echo "  sharding adds no per-request cost: --shard 0/1 $(py "f'{$s1_us/$ex_us:.2f}'")x, shard 1/4 $(py "f'{$s4_us/$ex_us:.2f}'")x the unsharded run's"

# Start-up: a one-request run, warm cache, against the zero-latency server. Its
# whole wall time bounds the time from start to the first request.
read -r best_ms start_rss < <(python3 - "$starts" "$target/batchbench" --host "$url" --users 1 --requests-per-user 1 "${exact[@]}" --quiet <<'PY'
import resource, subprocess, sys, time
reps, cmd = int(sys.argv[1]), sys.argv[2:]
walls = []
for _ in range(reps):
    t = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    walls.append((time.monotonic() - t) * 1e3)
print(f"{min(walls):.1f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
PY
)
echo "  warm start: a whole one-request run takes ${best_ms} ms (least of $starts), so the first request is sent within that of start: $(verdict "$best_ms <= 50") (target 50 ms)"
echo "  peak RSS of a synthetic exact-prompt run, warm cache: $((ex_rss/1024)) MB for $n requests, $((start_rss/1024)) MB for one: $(verdict "$ex_rss < 32*1024") (target under 32 MB)"

big=$((users * big_per_user))
read -r wall cpu rss _ _ _ < <(bb "$users" "$big_per_user" "${exact[@]}")
echo "  memory: $big exact-prompt requests: peak RSS $((rss/1024)) MB vs $((ex_rss/1024)) MB for $n: $(verdict "$rss <= 1.15 * $ex_rss + 4096") (flat: within 15% + 4 MB), $(per_request_us "$cpu" "$big") us/request"
