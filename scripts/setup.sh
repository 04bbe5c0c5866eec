#!/usr/bin/env bash
# Installs what latprof needs on a fresh Debian 12 machine. Safe to run twice.
# The CUDA toolkit is optional: when nvcc is on PATH (or at /usr/local/cuda) the CUDA backend is
# built too; without it latprof builds and runs on the CPU.
set -euo pipefail
# latprof serve: cpp-httplib, prometheus-cpp and OpenSSL (cpp-httplib's Debian build uses it);
# curl and the Prometheus server for its tests, which also drive it with the openai client (PyPI).
packages=(build-essential cmake git pkg-config libcli11-dev nlohmann-json3-dev libgtest-dev
          libgmock-dev libbenchmark-dev clang-format python3 python3-numpy chromium clang
          libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev prometheus-cpp-dev
          libcurl4-openssl-dev curl prometheus python3-pip)
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
# The openai Python client (server tests): into the user's site-packages; Debian's own Python
# refuses plain pip installs (PEP 668), so it is told this one is wanted.
if ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install --quiet --user openai 2>/dev/null ||
    python3 -m pip install --quiet --user --break-system-packages openai
fi
echo "setup: all packages present (${#packages[@]} checked), openai $(python3 -c 'import openai; print(openai.__version__)')"
