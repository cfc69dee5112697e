#!/usr/bin/env bash
# What watching a run costs the client: CPU per request of the same run three
# ways, against a zero-latency server on loopback (batchbench-sim in its own
# process), exact 32-token prompts with the Qwen tokenizer and 16 output tokens:
#   --quiet                      no bar, no live view
#   on a terminal                the bar and the live view drawn (a
#                                pseudo-terminal from util-linux's `script`)
#   --quiet --metrics-listen     the client's own Prometheus endpoint, scraped
#                                every 250 ms meanwhile
# Each is the least CPU of BENCH_REPS runs (default 3; interference only adds),
# measured by /usr/bin/time around batchbench alone.
#
#   bash bench/live.sh                 # release build
#   BENCH_SMOKE=1 bash bench/live.sh   # dev build, tiny sizes: proves the script runs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then users=4; per_user=50; else users=64; per_user=2000; fi
reps="${BENCH_REPS:-3}"
command -v script >/dev/null || { echo "bench/live.sh needs util-linux's script" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench/live.sh needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
build batchbench batchbench-sim
start_sim
timing=$(mktemp)
trap 'stop_sim; rm -f "$timing"' EXIT
n=$((users * per_user))
base=("$target/batchbench" --host "http://127.0.0.1:$port" --model "$tok" --input-tokens 32
  --output-tokens 16)
run=("${base[@]}" --users "$users" --requests-per-user "$per_user")
# Warm the word-table cache.
"${base[@]}" --users 1 --requests-per-user 1 --quiet > /dev/null

least() { # mode: prints the least CPU seconds of $reps runs
  local best="" cpu
  for _ in $(seq "$reps"); do
    case "$1" in
      quiet) /usr/bin/time -f '%U %S' -o "$timing" "${run[@]}" --quiet > /dev/null ;;
      terminal)
        TERM=xterm-256color script -qec "/usr/bin/time -f '%U %S' -o $timing $(printf '%q ' "${run[@]}")" /dev/null > /dev/null ;;
      listen)
        local addr="127.0.0.1:$((port + 1))"
        /usr/bin/time -f '%U %S' -o "$timing" "${run[@]}" --quiet --metrics-listen "$addr" > /dev/null &
        local pid=$!
        # The scraper: every 250 ms while the run goes on.
        ( sleep 0.1; while kill -0 "$pid" 2>/dev/null; do
            python3 -c "import urllib.request; urllib.request.urlopen('http://$addr/metrics').read()" 2>/dev/null || true
            sleep 0.25; done ) &
        local scraper=$!
        wait "$pid"; kill "$scraper" 2>/dev/null || true ;;
    esac
    cpu=$(awk '{print $1 + $2}' "$timing")
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $cpu < $best else 1)"; then best=$cpu; fi
  done
  echo "$best"
}

echo "client CPU per request, $n requests, $users users (least of $reps runs each)"
q=$(least quiet); t=$(least terminal); l=$(least listen)
us() { per_request_us "$1" "$n"; }
echo "  --quiet:                          ${q}s = $(us "$q") us/request"
echo "  live view on a terminal:          ${t}s = $(us "$t") us/request ($(python3 -c "print(f'{$t/$q:.3f}')")x)"
echo "  --quiet --metrics-listen scraped: ${l}s = $(us "$l") us/request ($(python3 -c "print(f'{$l/$q:.3f}')")x)"
echo "targets: each within 2% of --quiet (time(1) counts in 10 ms steps: a run of ${q}s is known to $(python3 -c "print(f'{100 * 0.01 / max($q, 0.01):.1f}')")%)"
if [ -n "$smoke" ]; then echo "(smoke run: tiny sizes in a debug build, to prove the script works; the figures are noise)"; fi
