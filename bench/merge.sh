#!/usr/bin/env bash
# `batchbench merge` at scale: wall time, CPU and peak RSS of merging 8, 16, 32
# and 64 shard directories of 100,000 requests each (up to 6.4 million
# requests), to show the merge is linear in the shards.
#
# One shard directory is made by a real run (shard 0 of 64 of a 64,000-user
# batchbench run of 100 requests per user, against batchbench-sim, streamed,
# exact 64-token prompts); the others are copies of it with their shard index
# set in run.json, so that the merge reads, checks and replays N real shard
# directories. The tool we replace has no sharding or merge: there is no
# reference figure to print.
#
#   bash bench/merge.sh                 # release build, full sizes (the shard is cached)
#   BENCH_SMOKE=1 bash bench/merge.sh   # dev build, tiny sizes
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then users=640; per=5; counts="2 4"
else users=64000; per=100; counts="8 16 32 64"; fi
ensure_tools
build batchbench batchbench-sim
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/bench"
mkdir -p "$cache"
shard="$cache/merge-shard-$users-$per"
if [ ! -s "$shard/run.json" ]; then
  rm -rf "$shard"
  start_sim
  trap stop_sim EXIT
  "$target/batchbench" --host "http://127.0.0.1:$port" --tokenizer-model "$tok" \
    --users "$users" --requests-per-user "$per" --input-tokens 64 --output-tokens 8 \
    --stream --seed 7 --shard 0/64 --quiet --output-dir "$shard.part" >/dev/null
  mv "$shard.part" "$shard"
  stop_sim
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
requests=$(wc -l <"$shard/requests.jsonl")
echo "one shard: $requests requests, $(du -sh "$shard" | cut -f1) on disk"
max=${counts##* }
for i in $(seq 0 $((max - 1))); do
  d="$work/shard-$i"
  mkdir -p "$d"
  for f in "$shard"/*; do
    [ "$(basename "$f")" = run.json ] || ln -s "$f" "$d/"
  done
  python3 - "$shard/run.json" "$d/run.json" "$i" "$max" <<'PY'
import json, sys
src, dst, i, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
doc = json.load(open(src))
doc["run"]["spec"]["shard"] = {"index": i, "count": n}
json.dump(doc, open(dst, "w"))
PY
done
for n in $counts; do
  # The first n of the max-way split, declared n-way.
  for i in $(seq 0 $((n - 1))); do
    python3 - "$work/shard-$i/run.json" "$n" <<'PY'
import json, sys
p, n = sys.argv[1], int(sys.argv[2])
doc = json.load(open(p))
doc["run"]["spec"]["shard"]["count"] = n
json.dump(doc, open(p, "w"))
PY
  done
  dirs=()
  for i in $(seq 0 $((n - 1))); do dirs+=("$work/shard-$i"); done
  out="$work/merged-$n"
  python3 - "$n" "$requests" "$target/batchbench" merge "${dirs[@]}" -o "$out" <<'PY'
import resource, subprocess, sys, time
n, per, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
before = resource.getrusage(resource.RUSAGE_CHILDREN)
t = time.monotonic()
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.monotonic() - t
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
total = n * per
print(f"merge of {n:>2} shards ({total:,} requests): wall {wall:.2f} s, cpu {cpu:.2f} s, "
      f"{1e6 * wall / total:.2f} us per request, peak RSS {after.ru_maxrss / 1024:.0f} MiB")
PY
  test "$(wc -l <"$out/requests.jsonl")" -eq $((n * requests))
  rm -rf "$out"
done
