#!/usr/bin/env bash
# Soak: `batchbench` at a fixed open-loop rate for 30 minutes against the
# simulator (its own process) with 5% injected faults, exact 32-token prompts
# with the Qwen tokenizer and streamed 16-token replies. Samples the client's
# resident memory every 10 s from /proc and prints the curve, then whether it
# stayed flat: the last sample within 10% (or 8 MiB) of the one at the end of
# the first minute, once allocators and pools have warmed up.
#
#   bash bench/soak.sh                   # release build, 30 min at 200 req/s
#   BENCH_SMOKE=1 bash bench/soak.sh     # dev build, 20 s: proves the script runs
#   SOAK_SECS=600 SOAK_RATE=500 bash bench/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then secs=20; rate=50; every=2
else secs="${SOAK_SECS:-1800}"; rate="${SOAK_RATE:-200}"; every="${SOAK_EVERY:-10}"; fi
build batchbench batchbench-sim
start_sim --fault-rate 0.05 --decode-ms-per-token 1
trap stop_sim EXIT

out=$(mktemp -d)
"$target/batchbench" --host "http://127.0.0.1:$port" --tokenizer-model "$tok" \
  --request-rate "$rate" --arrival constant --duration-secs "$secs" \
  --input-tokens 32 --output-tokens 16 --stream --max-retries 0 --max-failure-rate 0.2 \
  --quiet --summary-json "$out/summary.json" >/dev/null &
pid=$!
echo "soak: $secs s at $rate req/s, 5% faults, RSS every $every s (pid $pid)"
samples=()
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  if [ -n "$rss" ]; then
    t=$(( $(date +%s) - start ))
    samples+=("$t $rss")
    awk -v t="$t" -v r="$rss" 'BEGIN { printf "  t=%5d s  rss %7.1f MiB\n", t, r / 1024 }'
  fi
  sleep "$every"
done
wait "$pid" || { echo "the soak run failed" >&2; exit 1; }
printf '%s\n' "${samples[@]}" > "$out/rss.txt"
python3 - "$out/summary.json" "$secs" "$out/rss.txt" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))["summary"]
secs = float(sys.argv[2])
rows = [tuple(map(int, l.split())) for l in open(sys.argv[3]) if l.strip()]
if len(rows) < 3:
    print("too few samples to judge"); sys.exit(0)
warm_t = min(60, secs / 3)
warm = next((r for t, r in rows if t >= warm_t), rows[-1][1])
last = rows[-1][1]
peak = max(r for _, r in rows)
growth = last - warm
ok = growth <= max(0.10 * warm, 8 * 1024)
print(
    f"requests {summary['total_requests']} ({summary['failed_requests']} failed, "
    f"{summary['failures_by_kind']}); RSS after warm-up {warm / 1024:.1f} MiB, "
    f"last {last / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, growth {growth / 1024:+.1f} MiB: "
    f"{'flat (met)' if ok else 'GROWING (NOT met)'}"
)
PY
rm -rf "$out"
