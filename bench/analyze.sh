#!/usr/bin/env bash
# `analyze` at scale, sending nothing: wall time, CPU and peak RSS of
#   - a Mooncake-shaped conversation trace of 12,031 requests (512-token hash
#     blocks, sessions that grow their hash ids and share popular prefixes),
#     read through the mooncake_trace WebAssembly plugin, blocks of 512 and of
#     16 tokens, with LRU caches of 1M, 4M and 16M tokens on 8 ranks;
#   - the generated v2 manifest of bench/replay.sh (100,000 trajectories,
#     2,000,000 requests), blocks of 16, LRU caches on 4 ranks.
# The tool we replace has no analysis: there is no reference figure to print. The
# trace's prompt and output token distributions are checked against a sort of its
# rows done here in Python: both printed, and the script fails when they differ
# beyond the histogram's precision (3 significant figures).
#
#   bash bench/analyze.sh                 # release build, full sizes (manifests cached)
#   BENCH_SMOKE=1 bash bench/analyze.sh   # dev build, tiny sizes
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then trajs=200; per=20; mooncake=300
else trajs=100000; per=20; mooncake=12031; fi
ensure_tools
build batchbench-agent
if ! rustup target list --installed | grep -qx wasm32-wasip2; then rustup target add wasm32-wasip2; fi
cargo build --quiet --release --target wasm32-wasip2 -p mooncake-trace
plugin="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/wasm32-wasip2/release/mooncake_trace.wasm"
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/bench"
mkdir -p "$cache"

trace="$cache/mooncake-shaped-$mooncake.jsonl"
if [ ! -s "$trace" ]; then
  python3 - "$trace.part" "$mooncake" <<'PY'
import json, random, sys
out, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
# 40 popular prefixes (system prompts, documents) of 2 to 24 blocks.
popular = []
next_id = 0
for _ in range(40):
    k = rng.randint(2, 24)
    popular.append(list(range(next_id, next_id + k)))
    next_id += k
rows, t = [], 0
while len(rows) < n:
    ids = list(popular[min(int(rng.expovariate(0.15)), 39)]) if rng.random() < 0.7 else []
    for _ in range(max(1, int(rng.expovariate(1 / 3.6)))):
        if len(rows) >= n:
            break
        grow = rng.randint(1, 6)
        ids = ids + list(range(next_id, next_id + grow))
        next_id += grow
        length = len(ids) * 512 - rng.randint(0, 511)
        rows.append({"timestamp": t, "input_length": length,
                     "output_length": rng.randint(16, 600), "hash_ids": ids})
        t += rng.randint(0, 600)
with open(out, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
PY
  mv "$trace.part" "$trace"
fi
big="$cache/replay-$trajs-$per.jsonl"
if [ ! -s "$big" ]; then
  python3 bench/gen_manifest.py "$big.part" "$trajs" "$per"
  mv "$big.part" "$big"
fi

# measure LABEL CMD...: one line of figures, and the analysis' headline. With
# CHECK_TRACE set to a Mooncake trace, its distributions are checked too.
measure_analyze() {
  local label=$1; shift
  python3 - "$label" "$@" <<'PY'
import json, math, resource, subprocess, sys, tempfile, time, os
label, cmd = sys.argv[1], sys.argv[2:]
with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "a.json")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(cmd + ["--quiet", "--json", out], check=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    a = json.load(open(out))
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
s = a["sharing"]
print(f"{label}: {a['requests']:,} requests, {a['sessions']:,} sessions, "
      f"{s['distinct_blocks']:,} distinct blocks of {a['block_tokens']} ({s['block_references']:,} sent)")
print(f"  wall {wall:.2f} s, cpu {cpu:.2f} s, peak RSS {after.ru_maxrss / 1024:.0f} MiB "
      f"({after.ru_maxrss * 1024 / max(s['distinct_blocks'], 1):.0f} bytes per distinct block)")
rows = ", ".join(
    f"{'ideal' if c['capacity_tokens'] is None else format(c['capacity_tokens'], ',')}: {100 * c['total']['hit_rate']:.1f}%"
    for c in a["caches"])
print(f"  global ideal hit rate {100 * a['global']['hit_rate']:.1f}%; per rank ({a['ranks']}, {a['routing']}) {rows}")
trace = os.environ.get("CHECK_TRACE")
if trace:
    rows = [json.loads(line) for line in open(trace)]
    bad = []
    for name, field in (("prompt_tokens", "input_length"), ("output_tokens", "output_length")):
        v = sorted(r[field] for r in rows)
        rank = lambda q: v[max(1, math.ceil(q * len(v))) - 1]  # nearest rank
        want = {"count": len(v), "total": sum(v), "mean": sum(v) / len(v), "min": v[0],
                "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99), "max": v[-1]}
        got = a[name]
        keys = ("min", "p50", "p90", "p99", "max")
        print(f"  {name}: analyze  " + " ".join(f"{k} {got[k]}" for k in keys) + f" mean {got['mean']:.1f}")
        print(f"  {' ' * len(name)}  sorted   " + " ".join(f"{k} {want[k]}" for k in keys) + f" mean {want['mean']:.1f}")
        for k, w in want.items():
            g = got[k]
            # Count, total, mean, min and max are exact; a percentile is the
            # highest value of its bucket: at most 0.1% above.
            ok = (w <= g <= w + w * 0.001) if k in ("p50", "p90", "p99") else (
                math.isclose(g, w, rel_tol=1e-12) if k == "mean" else g == w)
            if not ok:
                bad.append(f"{name}.{k}: analyze {g}, sorted {w}")
    if bad:
        sys.exit("analyze's distributions differ from a sort of the trace: " + "; ".join(bad))
    print("  prompt and output tokens agree with a sort of the trace (3 significant figures)")
PY
}

t="$(realpath "$trace")"
cfg="{\"path\": \"$t\", \"sandbox\": {\"allow_read\": [\"$t\"]}}"
agent="$target/batchbench-agent"
CHECK_TRACE="$t" measure_analyze "mooncake-shaped trace, blocks of 512" \
  "$agent" analyze --plugin "$plugin" --workload mooncake_trace --workload-config "$cfg" \
  --cache-block-tokens 512 --cache-tokens 1M,4M,16M --ranks 8
measure_analyze "mooncake-shaped trace, blocks of 16" \
  "$agent" analyze --plugin "$plugin" --workload mooncake_trace --workload-config "$cfg" \
  --cache-tokens 1M,4M,16M --ranks 8
measure_analyze "v2 manifest, $trajs x $per" \
  "$agent" analyze "$big" --cache-tokens 1M,16M --ranks 4
