#!/usr/bin/env bash
# Client CPU per request and peak memory of `batchbench` against a zero-latency
# server on loopback (batchbench-sim in its own process), with wrk's CPU per
# request against the same server in the same run as the physical reference.
#
#   bash bench/client-cpu.sh            # release build, 64 users x 1000, then 1,000,000 requests
#   BENCH_SMOKE=1 bash bench/client-cpu.sh   # dev build, tiny sizes: proves the script runs
#
# Needs /usr/bin/time and wrk (Debian packages `time` and `wrk`; installed when missing and root).
set -euo pipefail
cd "$(dirname "$0")/.."

smoke="${BENCH_SMOKE:-}"
if [ -n "$smoke" ]; then
  profile=dev; dir=debug; users=8; per_user=50; big_per_user=100; wrk_secs=1
else
  profile=release; dir=release; users=64; per_user=1000; big_per_user=15625; wrk_secs=5
fi
if ! command -v wrk >/dev/null || [ ! -x /usr/bin/time ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq wrk time) >/dev/null 2>&1 || true
  fi
fi

cargo build --quiet --profile "$profile" -p batchbench -p batchbench-sim
target="${CARGO_TARGET_DIR:-target}/$dir"
tok="$(examples/fetch-tokenizers.sh)/qwen/tokenizer.json"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$target/batchbench-sim" --port "$port" --tokenizer-model "$tok" 2>/tmp/bb-sim.$$.log &
sim=$!
trap 'kill $sim 2>/dev/null || true; rm -f "$lua"' EXIT
lua=$(mktemp --suffix=.lua)
for _ in $(seq 100); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health')" 2>/dev/null && break
  sleep 0.1
done
kill -0 $sim 2>/dev/null || { cat /tmp/bb-sim.$$.log >&2; echo "the simulator did not start" >&2; exit 1; }

# batchbench: the fixed prompt, 16 output tokens; no tokenizer is loaded on the
# client for this shape, so the figure is transport + codec + engine.
measure() { # users per_user -> "wall user sys maxrss_kb"
  /usr/bin/time -f '%e %U %S %M' -o /tmp/bb-time.$$ \
    "$target/batchbench" --host "http://127.0.0.1:$port" --users "$1" --requests-per-user "$2" \
    --output-tokens 16 --quiet --summary-json /tmp/bb-summary.$$.json >/dev/null
  python3 - /tmp/bb-summary.$$.json "$(($1 * $2))" <<'PY' >&2
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
if s["successful_requests"] != int(sys.argv[2]):
    sys.exit(f"bench invalid: {s['successful_requests']} of {sys.argv[2]} requests succeeded: {s['failures_by_kind']}")
PY
  cat /tmp/bb-time.$$; rm -f /tmp/bb-time.$$ /tmp/bb-summary.$$.json
}

read -r wall usr sys rss < <(measure "$users" "$per_user")
n=$((users * per_user))
bb_us=$(python3 -c "print(f'{($usr+$sys)/$n*1e6:.1f}')")
echo "batchbench: $n requests, $users users: ${wall}s wall, $(python3 -c "print(f'{$n/$wall:.0f}')") req/s, CPU ${usr}s user + ${sys}s sys = ${bb_us} us/request, peak RSS $((rss/1024)) MB"

if command -v wrk >/dev/null; then
  cat > "$lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"Qwen/Qwen3-VL-235B-A22B-Instruct-FP8","messages":[{"role":"user","content":"Write a short paragraph about the history of computing."}],"max_tokens":16,"min_tokens":16}'
LUA
  /usr/bin/time -f '%U %S' -o /tmp/wrk-time.$$ wrk -t1 -c"$users" -d"${wrk_secs}s" -s "$lua" "http://127.0.0.1:$port/v1/chat/completions" > /tmp/wrk-out.$$
  read -r wusr wsys < /tmp/wrk-time.$$
  wn=$(awk '/requests in/ {print $1}' /tmp/wrk-out.$$)
  rm -f /tmp/wrk-time.$$ /tmp/wrk-out.$$
  wrk_us=$(python3 -c "print(f'{($wusr+$wsys)/$wn*1e6:.1f}')")
  echo "wrk (reference): $wn requests, $users connections, ${wrk_secs}s: CPU ${wusr}s user + ${wsys}s sys = ${wrk_us} us/request"
  echo "ratio batchbench/wrk CPU per request: $(python3 -c "print(f'{$bb_us/$wrk_us:.2f}')")x (target: at most 25 us/request absolute)"
else
  echo "wrk is not installed: no reference figure (apt-get install wrk)"
fi

big=$((users * big_per_user))
read -r wall usr sys rss < <(measure "$users" "$big_per_user")
echo "memory: $big requests: peak RSS $((rss/1024)) MB (target: under 64 MB, flat in the request count), $(python3 -c "print(f'{($usr+$sys)/$big*1e6:.1f}')") us/request"
