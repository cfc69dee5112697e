#!/usr/bin/env bash
# Joules per output token of a real server, next to its throughput: llama.cpp's
# server built with CUDA on the GPUs beside the client, a closed loop at a few
# concurrency levels, exact prompts (BENCH_INPUT tokens, default 1024) and
# outputs run to their length (BENCH_OUTPUT, default 128, with ignore_eos).
# Power and energy come from NVML (--gpu-telemetry nvml), or from a DCGM
# exporter when BENCH_GPU_METRICS names its /metrics URL; the server's own
# /metrics is scraped beside them (its generation rate, running requests).
#
#   BENCH_URL=http://127.0.0.1:8080 BENCH_TOKENIZER=model.gguf bash bench/energy.sh
#       the server must be up: e.g. `llama-server -m model.gguf -ngl 99 -np 64
#       -c 196608 --metrics --port 8080`; BENCH_LEVELS="1 8 32 64" (the default),
#       BENCH_REQUESTS requests per level (default 16 x the level, at least 64)
#   BENCH_SMOKE=1 bash bench/energy.sh
#       dev build against the simulator and a synthetic DCGM exporter (300 W a
#       GPU, two GPUs): proves the script runs; the figures are the exporter's
#
# Prints per level: requests, req/s, output tok/s (the client's count), the
# server's generation tok/s (its own counter), mean and peak power, and joules
# per output token, per request and per 1,000 prompt tokens, with the energy's
# source (the counter, or integrated power).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
input="${BENCH_INPUT:-1024}"; output="${BENCH_OUTPUT:-128}"
levels="${BENCH_LEVELS:-1 8 32 64}"
work=$(mktemp -d)
cleanup() { [ -n "${exporter_pid:-}" ] && kill "$exporter_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

if [ -n "$smoke" ]; then
  build batchbench
  url="sim://?ttft-base-ms=5&decode-ms-per-token=1"
  levels="${BENCH_LEVELS:-1 4}"; input=64; output=16
  # A DCGM exporter of two GPUs at 300 W and 250 W, energy counters rising with it.
  eport=$(free_port)
  python3 - "$eport" <<'PY' &
import http.server, sys, time
start = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        t = time.monotonic() - start
        body = "".join(
            f'DCGM_FI_DEV_POWER_USAGE{{gpu="{g}"}} {w}\n'
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="{g}"}} {int(1e9 + w * t * 1000)}\n'
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}"}} 90\n'
            for g, w in ((0, 300), (1, 250))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
  exporter_pid=$!
  for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$eport/metrics')" 2>/dev/null && break
    sleep 0.1
  done
  gpu=(--server-metrics "http://127.0.0.1:$eport/metrics")
else
  url="${BENCH_URL:?BENCH_URL names the running server (llama.cpp built with CUDA), e.g. http://127.0.0.1:8080}"
  export BENCH_TOKENIZER="${BENCH_TOKENIZER:?BENCH_TOKENIZER names the tokenizer of the model (its GGUF or a tokenizer.json)}"
  if [ -z "${BENCH_BIN_DIR:-}" ]; then build batchbench; tok="$BENCH_TOKENIZER"; else build; fi
  if [ -n "${BENCH_GPU_METRICS:-}" ]; then
    gpu=(--server-metrics "$BENCH_GPU_METRICS")
  else
    gpu=(--gpu-telemetry nvml)
  fi
fi
gpu+=(--server-metrics target)

echo "energy per output token: $url, $input prompt and $output output tokens a request, power from ${gpu[*]}"
printf '%6s %8s %8s %11s %11s %8s %8s %9s %9s %9s  %s\n' users requests 'req/s' 'out tok/s' 'server t/s' 'mean W' 'peak W' 'J/out tok' 'J/req' 'J/1k in' source
for c in $levels; do
  if [ -n "${BENCH_REQUESTS:-}" ]; then n=$BENCH_REQUESTS; else n=$((c * 16 < 64 ? 64 : c * 16)); fi
  [ -n "$smoke" ] && n=$((c * 8))
  per_user=$(( (n + c - 1) / c ))
  out="$work/level-$c.json"
  "$target/batchbench" --quiet --host "$url" --tokenizer-model "$tok" \
    --users "$c" --requests-per-user "$per_user" --input-tokens "$input" \
    --output-tokens "$output" --ignore-eos --stream \
    "${gpu[@]}" --metrics-interval 0.25 --summary-json "$out" > /dev/null
  python3 - "$out" "$c" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
users = sys.argv[2]
if s["failed_requests"]:
    sys.exit(f"bench invalid: {s['failed_requests']} requests failed at {users} users: {s['failures_by_kind']}")
secs = s["total_duration_seconds"]
m = s.get("server_metrics") or {}
e = m.get("energy")
if not e:
    sys.exit(f"no energy figure at {users} users: the GPU source gave no power ({m.get('failed_scrapes', '?')} scrapes failed)")
gen = (m.get("metrics") or {}).get("generation_tokens_per_second", {}).get("mean")
f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"
print(f"{users:>6} {s['successful_requests']:>8} {s['successful_requests'] / secs:>8.2f} "
      f"{s['total_completion_tokens'] / secs:>11.1f} {f(gen):>11} {f(e.get('mean_power_watts')):>8} "
      f"{f(e.get('peak_power_watts')):>8} {f(e.get('joules_per_output_token'), 3):>9} "
      f"{f(e.get('joules_per_request'), 2):>9} {f(e.get('joules_per_1k_prompt_tokens'), 2):>9}  {e['source']}")
PY
done
echo "(the energy covers the run's scrape window, idle edges included; more requests a level make them small)"
