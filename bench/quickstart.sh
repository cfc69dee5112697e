#!/usr/bin/env bash
# Times examples/quickstart.sh as a newcomer meets it: a fresh clone of the
# committed tree, an empty cargo home (the crates are fetched again), an empty
# batchbench cache (no build directory, tokenizers fetched again) and an empty pip
# cache. Prints the time to the first result (the run's summary) against the
# 8-minute target. Takes minutes and the whole machine: not part of the CI smoke.
#
#   bash bench/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet . "$work/clone"
export CARGO_HOME="$work/cargo-home" BATCHBENCH_CACHE="$work/cache" PIP_CACHE_DIR="$work/pip-cache"
unset CARGO_TARGET_DIR CARGO_INSTALL_ROOT
mkdir -p "$CARGO_HOME"
echo "cold quickstart in $work/clone (cargo $(cargo --version | cut -d' ' -f2), $(nproc) cores)"
log="$work/quickstart.log"
start=$(date +%s.%N)
first=""
# Timestamp the first line of the summary as it is printed.
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$log"
  if [ -z "$first" ] && [[ "$line" == "batchbench summary"* ]]; then
    first=$(date +%s.%N)
  fi
done < <(cd "$work/clone" && examples/quickstart.sh 2>&1; echo "quickstart exit status $?")
end=$(date +%s.%N)
tail -n 25 "$log"
grep -q "quickstart exit status 0" "$log" || { echo "the quickstart failed" >&2; exit 1; }
grep -E "crates fetched in|built and installed in" "$log" || true
total=$(python3 -c "print(f'{($end-$start)/60:.1f}')")
to_first=$(python3 -c "print(f'{(${first:-$end}-$start)/60:.1f}')")
met=$(python3 -c "print('met' if ${first:-$end}-$start <= 480 else 'NOT met')")
echo "cold quickstart: first result after $to_first min, all done after $total min: $met (target: under 8 minutes)"
