#!/usr/bin/env bash
# Validates llm-d Benchmark Report files with the schema's own PyPI package
# (llmd-benchmark-report 0.2.1), installed once into a virtual environment in the
# cache outside the clone.
#
#   bash .ci/llmd.sh python          # install; print the environment's python
#   bash .ci/llmd.sh validate FILE.. # exit 1 naming the first file that fails
set -euo pipefail
cache="${BATCHBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/batchbench}/llmd"
version="0.2.1"
py="$cache/venv/bin/python"

install() {
  if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('llmd-benchmark-report') != '$version')" 2>/dev/null; then
    echo "installing llmd-benchmark-report $version into $cache/venv" >&2
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet --disable-pip-version-check "llmd-benchmark-report==$version" >&2
  fi
}

case "${1:-}" in
  python)
    install
    echo "$py"
    ;;
  validate)
    shift
    install
    "$py" - "$@" <<'PY'
import sys
from llmd_benchmark_report import import_benchmark_report
for path in sys.argv[1:]:
    report = import_benchmark_report(path)
    print(f"{path}: valid Benchmark Report v{report.version}")
PY
    ;;
  *)
    echo "usage: bash .ci/llmd.sh python | validate FILE..." >&2
    exit 2
    ;;
esac
