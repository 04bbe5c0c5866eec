#!/usr/bin/env bash
# Builds the libFuzzer targets for the GGUF and safetensors parsers and runs each for N seconds
# (default 20) on a copy of the seed corpus in tests/corpus/.
#   scripts/fuzz.sh [SECONDS]       env: FUZZ_OUT (build dir, default build-fuzz), CXX (clang++)
set -euo pipefail
secs="${1:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${FUZZ_OUT:-$root/build-fuzz}"
cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found; installing clang" >&2
  apt-get install -y clang >/dev/null
  cxx=clang++
fi
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$root/src" -I"$root")
m="$root/src/model"
echo "building fuzz_gguf, fuzz_safetensors in $out"
"$cxx" "${flags[@]}" -o "$out/fuzz_gguf" "$root/tests/fuzz/fuzz_gguf.cpp" "$m/gguf.cpp" \
  "$m/mmap_file.cpp" "$m/tokenizer_common.cpp" "$m/tokenizer_spm.cpp" "$m/tokenizer_bpe.cpp" \
  "$m/tokenizer_load.cpp"
"$cxx" "${flags[@]}" -o "$out/fuzz_safetensors" "$root/tests/fuzz/fuzz_safetensors.cpp" \
  "$m/safetensors.cpp" "$m/mmap_file.cpp"
for t in gguf safetensors; do
  work="$out/corpus_$t"
  mkdir -p "$work"
  cp "$root"/tests/corpus/*."$t" "$work"/
  echo "running fuzz_$t for ${secs}s"
  "$out/fuzz_$t" -max_total_time="$secs" -max_len=16384 -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 12
done
echo "fuzz.sh: no crashes"
