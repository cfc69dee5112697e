#!/usr/bin/env bash
# A real ClickHouse engine for the export tests, from PyPI only: chdb-core (the
# ClickHouse engine, in-process) behind a loopback HTTP front that speaks the parts
# of ClickHouse's HTTP interface the `clickhouse` crate uses (.ci/clickhouse_front.py),
# holding the production schema and the fixtures of .ci/clickhouse_fixtures.py.
#
#   bash .ci/clickhouse.sh start   # install (cached outside the clone), load, serve;
#                                  # prints CLICKHOUSE_URL=http://user:password@127.0.0.1:PORT
#   bash .ci/clickhouse.sh stop
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/clickhouse"
chdb_version="26.9.0"
port="${BATCHBENCH_CLICKHOUSE_PORT:-18392}"
user="batchbench"
# A password with characters that need escaping in a URL: the tests check it never
# appears in any output.
password="s3cret:pa@ss/word"
password_url="s3cret%3Apa%40ss%2Fword"
pidfile="$cache/front.pid"
log="$cache/front.log"

install() {
  mkdir -p "$cache"
  if [ ! -x "$cache/venv/bin/python" ] ||
     ! "$cache/venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('chdb-core') != '$chdb_version')" 2>/dev/null; then
    echo "installing chdb-core $chdb_version into $cache/venv" >&2
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "chdb-core==$chdb_version" lz4 >&2
  fi
}

stop() {
  if [ -s "$pidfile" ]; then
    local pid
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  fi
  rm -rf "$cache/data"
}

start() {
  install
  stop
  python3 "$here/clickhouse_fixtures.py" >"$cache/fixtures.sql"
  "$cache/venv/bin/python" "$here/clickhouse_front.py" "$cache/data" "$port" "$user" "$password" \
    "$cache/fixtures.sql" >"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$port/ping" >/dev/null 2>&1; then
      echo "CLICKHOUSE_URL=http://$user:$password_url@127.0.0.1:$port"
      return 0
    fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "the ClickHouse front exited; its log:" >&2
      tail -n 40 "$log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "the ClickHouse front did not answer /ping in 60 s" >&2
  stop
  return 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
