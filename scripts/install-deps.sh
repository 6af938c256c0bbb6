#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian 12 machine: the real readers of memprof's outputs
# and the test runner. Safe to run again.
#
# Each need is a command (or, for pprof's Go sources, a package) and the Debian package that brings
# it. A need already met in any way is left alone: Node.js from another repository already carries
# npm, and asking apt for Debian's npm beside it fails with held packages.
set -euo pipefail

missing=()
need_command() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_package() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || missing+=("$1"); }

need_command heaptrack_print heaptrack
need_command valgrind valgrind
need_command objcopy binutils
need_command go golang-go
need_package golang-github-google-pprof-dev
need_command chromium chromium
need_command npm npm
# The preloaded library's tests build C and C++ programs (a static one among them: libc6-dev's
# libc.a) and run real programs under it.
need_command cc gcc
need_command c++ g++
need_package libc6-dev
need_command python3 python3
need_command git git
# memprof attach loads the preloaded library into a running process through gdb (its Python
# scripting picks the thread to call into); its 32-bit refusal test assembles with binutils.
need_command gdb gdb
# scripts/preload-overhead.py --real and --trace-memory run ripgrep under the preloaded library.
need_command rg ripgrep

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
