#!/usr/bin/env bash
# Start-up with a GGUF model file as the tokenizer (--tokenizer-model MODEL.gguf).
# The proven word table is cached under a digest of the tokenizer metadata in the
# file, not of the file, so a warm start does not grow with the model.
#
# A GGUF file of 2 GiB and a bit is written: the Qwen tokenizer's vocabulary, token
# types and merges as llama.cpp's converter stores them (pre-tokenizer qwen2), and
# one tensor of 2 GiB. The tensor's bytes are left a hole (a sparse file: nothing
# that starts a run reads them; on a file system without holes they are zeros on
# disk). Then whole one-request runs against batchbench-sim on loopback are timed:
# a cold start (empty cache: the tokenizer parsed, the table built, proven and
# written), warm starts of the large file, of a metadata-only file holding the same
# tokenizer (same key, so same cache entry), and of the Qwen tokenizer.json.
# For scale: what hashing the whole file costs, which a cache keyed by the file's
# SHA-256 paid at every start.
#
#   bash bench/gguf-start.sh                 # release build, a 2 GiB file
#   BENCH_SMOKE=1 bash bench/gguf-start.sh   # dev build, a 16 MiB file
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -n "$smoke" ]; then tensor=$((16 << 20)); starts=2
else tensor=$((2 << 30)); starts=10; fi
build batchbench batchbench-sim
work=$(mktemp -d)
start_sim
trap 'stop_sim; rm -rf "$work"' EXIT
url="http://127.0.0.1:$port"

# write-gguf TOKENIZER_JSON OUT TENSOR_BYTES: a GGUF v3 file of the tokenizer's
# metadata and one int8 tensor of TENSOR_BYTES (0: no tensor), its data a hole.
write_gguf() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, out, tensor = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = json.load(open(src, encoding="utf-8"))
pieces = {v: (k, 1) for k, v in doc["model"]["vocab"].items()}
for t in doc["added_tokens"]:
    pieces[t["id"]] = (t["content"], 3 if t["special"] else 4)
n = max(pieces) + 1
tokens = [pieces.get(i, (f"[PAD{i}]", 5)) for i in range(n)]
merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in doc["model"]["merges"]]
def string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b
def kv_str(k, v):
    return string(k) + struct.pack("<I", 8) + string(v)
def kv_strs(k, vs):
    return string(k) + struct.pack("<IIQ", 9, 8, len(vs)) + b"".join(map(string, vs))
def kv_i32s(k, vs):
    return string(k) + struct.pack("<IIQ", 9, 5, len(vs)) + struct.pack(f"<{len(vs)}i", *vs)
kvs = [
    kv_str("general.architecture", "qwen2"),
    kv_str("general.name", "bench padding"),
    kv_str("tokenizer.ggml.model", "gpt2"),
    kv_str("tokenizer.ggml.pre", "qwen2"),
    kv_strs("tokenizer.ggml.tokens", [p for p, _ in tokens]),
    kv_i32s("tokenizer.ggml.token_type", [t for _, t in tokens]),
    kv_strs("tokenizer.ggml.merges", merges),
]
head = b"GGUF" + struct.pack("<IQQ", 3, 1 if tensor else 0, len(kvs)) + b"".join(kvs)
if tensor:
    # One tensor: name, 1 dimension, its length, GGML_TYPE_I8 (24), offset 0.
    head += string("weights") + struct.pack("<IQIQ", 1, tensor, 24, 0)
    head += b"\0" * (-len(head) % 32)
with open(out, "wb") as f:
    f.write(head)
    f.truncate(len(head) + tensor)
PY
}
big="$work/model.gguf"; small="$work/tokenizer-only.gguf"
write_gguf "$tok" "$big" "$tensor"
write_gguf "$tok" "$small" 0
echo "GGUF files (Qwen tokenizer, $(python3 -c "import json; print(len(json.load(open('$tok'))['model']['vocab']))") pieces):"
echo "  $(basename "$big"): $(stat -c %s "$big") bytes ($(du -k "$big" | cut -f1) KiB on disk), metadata-only $(basename "$small"): $(stat -c %s "$small") bytes"

# starts LABEL REPS CACHE TOKENIZER: whole one-request runs; prints the least and
# the median wall time in ms.
starts() {
  local label=$1 reps=$2 cache=$3 tokenizer=$4
  BATCHBENCH_CACHE="$cache" python3 - "$label" "$reps" "$target/batchbench" --host "$url" \
    --model bench --tokenizer-model "$tokenizer" --users 1 --requests-per-user 1 \
    --input-tokens 32 --output-tokens 16 --quiet <<'PY'
import statistics, subprocess, sys, time
label, reps, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
walls = []
for _ in range(reps):
    t = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    walls.append((time.monotonic() - t) * 1e3)
more = f", median {statistics.median(walls):.1f} ms of {reps}" if reps > 1 else ""
print(f"  {label}: {min(walls):.1f} ms{more}")
PY
}

cache="$work/cache"
echo "whole one-request runs (start, tokenizer, word table, the request, exit):"
starts "cold, $(basename "$big") (tokenizer parsed, table proven and written)" 1 "$cache" "$big"
entries=$(ls "$cache/word-tables")
echo "  cache entry written: $entries"
line=$(starts "warm, $(basename "$big")" "$starts" "$cache" "$big")
echo "$line"
best=$(sed -E 's/^[^:]*: ([0-9.]+) ms.*/\1/' <<< "$line")
starts "warm, $(basename "$small") (the same entry)" "$starts" "$cache" "$small"
[ "$(ls "$cache/word-tables")" = "$entries" ] || { echo "the warm starts wrote another entry" >&2; exit 1; }
starts "cold" 1 "$cache" "$tok" > /dev/null # its own entry, by the file's digest
starts "warm, the Qwen tokenizer.json ($(stat -c %s "$tok") bytes, keyed by its SHA-256)" "$starts" "$cache" "$tok"
python3 - "$big" <<'PY'
import hashlib, sys, time
t = time.process_time()
with open(sys.argv[1], "rb") as f:
    hashlib.file_digest(f, "sha256")
print(f"for scale: SHA-256 of the whole {sys.argv[1].rsplit('/', 1)[-1]} (the key a start used to pay for), "
      f"hashlib: {time.process_time() - t:.2f} s of CPU")
PY
verdict=$(python3 -c "print('met' if $best < 100 else 'NOT met')")
echo "target: a warm start with a GGUF model file under 100 ms: ${best} ms: $verdict"
