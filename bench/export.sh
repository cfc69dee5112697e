#!/usr/bin/env bash
# export-plans throughput: rows per second from a generated rows file (the
# --dump-rows-jsonl shape) to a written, validated manifest, and the peak memory.
#
#   bash bench/export.sh                 # release build, 1,000,000 rows (~1 GB, cached)
#   BENCH_SMOKE=1 bash bench/export.sh   # dev build, 2,000 rows
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then n=2000; else n=1000000; fi
ensure_tools
build batchbench
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/bench"
mkdir -p "$cache"
rows="$cache/rows-$n.jsonl"
if [ ! -s "$rows" ]; then
  python3 bench/gen_rows.py "$rows.part" "$n"
  mv "$rows.part" "$rows"
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "rows file: $n rows, $(python3 -c "import os; print(f'{os.path.getsize(\"$rows\")/1e6:.0f}')") MB"
/usr/bin/time -f "%e %M" -o "$out/time" "$target/batchbench" export-plans \
  --start 2026-09-01T09:00:00Z --end 2026-09-01T10:00:00Z \
  --rows-jsonl "$rows" --output "$out/plans.jsonl" 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
read -r secs kb <"$out/time"
python3 - "$n" "$secs" "$kb" "$out/plans.jsonl" <<'PY'
import os, sys
n, secs, kb, plans = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(f"export-plans --rows-jsonl: {n / max(secs, 1e-9):,.0f} rows/s ({secs:.2f} s), "
      f"peak RSS {kb / 1024:.0f} MB, manifest {os.path.getsize(plans) / 1e6:.0f} MB")
PY
grep -E "trajectories|requests:" "$out/log" | tr '\n' ' '; echo
