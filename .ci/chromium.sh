#!/usr/bin/env bash
# Prints the path of a Chromium that runs headless, for the browser tests: the one on
# the machine (chromium, chromium-browser or google-chrome), or else Debian's
# `chromium` package, installed here. Nothing is downloaded from outside the package
# registry. Chromium is no service: each test starts it and it exits.
set -euo pipefail
for c in chromium chromium-browser google-chrome; do
  if p="$(command -v "$c")" && "$p" --version >/dev/null 2>&1; then
    echo "$p"
    exit 0
  fi
done
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "installing Debian's chromium package" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  chromium fonts-dejavu-core >&2
command -v chromium
