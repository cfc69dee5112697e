#!/usr/bin/env bash
# Client CPU per request and peak memory of `batchbench` against a zero-latency
# server on loopback (batchbench-sim in its own process), with wrk's CPU per
# request against the same server in the same run as the physical reference.
#
#   bash bench/client-cpu.sh                 # release build, 64 users x 1000, then 1,000,000 requests
#   BENCH_SMOKE=1 bash bench/client-cpu.sh   # dev build, tiny sizes: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then users=8; per_user=50; big_per_user=100; wrk_secs=1
else users=64; per_user=1000; big_per_user=15625; wrk_secs=5; fi
ensure_tools
build batchbench batchbench-sim
start_sim
lua=$(mktemp --suffix=.lua)
trap 'stop_sim; rm -f "$lua"' EXIT

# The fixed prompt and 16 output tokens: no tokenizer is loaded on the client for
# this shape, so the figure is transport + codec + engine.
bb() { cpu_of $(($1 * $2)) "$target/batchbench" --host "http://127.0.0.1:$port" --users "$1" --requests-per-user "$2" --output-tokens 16; }

read -r wall cpu rss _ < <(bb "$users" "$per_user")
n=$((users * per_user))
bb_us=$(per_request_us "$cpu" "$n")
echo "batchbench: $n requests, $users users: ${wall}s wall, $(python3 -c "print(f'{$n/$wall:.0f}')") req/s, CPU ${cpu}s = ${bb_us} us/request, peak RSS $((rss/1024)) MB"

if command -v wrk >/dev/null; then
  cat > "$lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"Qwen/Qwen3-VL-235B-A22B-Instruct-FP8","messages":[{"role":"user","content":"Write a short paragraph about the history of computing."}],"max_tokens":16,"min_tokens":16}'
LUA
  wt=$(mktemp); wo=$(mktemp)
  /usr/bin/time -f '%U %S' -o "$wt" wrk -t1 -c"$users" -d"${wrk_secs}s" -s "$lua" "http://127.0.0.1:$port/v1/chat/completions" > "$wo"
  read -r wusr wsys < "$wt"
  wn=$(awk '/requests in/ {print $1}' "$wo")
  rm -f "$wt" "$wo"
  wrk_us=$(per_request_us "$wusr+$wsys" "$wn")
  echo "wrk (reference): $wn requests, $users connections, ${wrk_secs}s: CPU $(python3 -c "print(f'{$wusr+$wsys:.2f}')")s = ${wrk_us} us/request"
  echo "ratio batchbench/wrk CPU per request: $(python3 -c "print(f'{$bb_us/$wrk_us:.2f}')")x (target: at most 25 us/request absolute)"
else
  echo "wrk is not installed: no reference figure (apt-get install wrk)"
fi

big=$((users * big_per_user))
read -r wall cpu rss _ < <(bb "$users" "$big_per_user")
echo "memory: $big requests: peak RSS $((rss/1024)) MB (target: under 64 MB, flat in the request count), $(per_request_us "$cpu" "$big") us/request"
