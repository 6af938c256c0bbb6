#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian 12 machine: the real readers of memprof's outputs
# and the test runner. Safe to run again.
set -euo pipefail

packages=(heaptrack valgrind golang-go golang-github-google-pprof-dev chromium npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
