#!/usr/bin/env bash
# Installs what latprof needs on a fresh Debian 12 machine. Safe to run twice.
# The CUDA toolkit is optional: when nvcc is on PATH (or at /usr/local/cuda) the CUDA backend is
# built too; without it latprof builds and runs on the CPU.
set -euo pipefail
packages=(build-essential cmake git pkg-config libcli11-dev nlohmann-json3-dev libcurl4-openssl-dev libgtest-dev
          libgmock-dev libbenchmark-dev clang-format python3 python3-numpy chromium clang)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
echo "setup: all packages present (${#packages[@]} checked)"
