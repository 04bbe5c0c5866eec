#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each for N seconds (default 20) on a copy of its seed
# corpus: the GGUF and safetensors parsers (tests/corpus/), and the JSON readers (the model config,
# the hardware file, the run report / prediction with its chart, latprof serve's request bodies;
# tests/corpus_json/<kind>/).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   env: FUZZ_OUT (build dir, default build-fuzz),
#                                           CXX (clang++); TARGET: gguf safetensors config
#                                           hardware report request (default: all)
set -euo pipefail
secs="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gguf safetensors config hardware report request)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${FUZZ_OUT:-$root/build-fuzz}"
cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found; installing clang" >&2
  apt-get install -y clang >/dev/null
  cxx=clang++
fi
mkdir -p "$out/obj"
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
cflags=(-std=c++20 -O1 -g -fno-omit-frame-pointer "${san[@]}" -I"$root/src" -I"$root"
        -I"$root/tests/fuzz")
# Each library source is compiled once (instrumented for coverage) and shared by the targets.
obj() {
  local src="$1" o
  o="$out/obj/$(echo "${src#"$root"/}" | tr '/' '_').o"
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ]; then
    "$cxx" "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$o"
  fi
  echo "$o"
}
sources_for() {
  local s="$root/src"
  case "$1" in
    gguf) echo "$s/model/gguf.cpp $s/model/mmap_file.cpp $s/model/tokenizer_common.cpp" \
               "$s/model/tokenizer_spm.cpp $s/model/tokenizer_bpe.cpp $s/model/tokenizer_load.cpp" ;;
    safetensors) echo "$s/model/safetensors.cpp $s/model/mmap_file.cpp" ;;
    config) echo "$s/model/config.cpp $s/model/cost_model.cpp $s/core/utf8.cpp" \
                 "$root/tests/fuzz/fuzz_stubs.cpp" ;;
    hardware) echo "$s/roofline/hardware.cpp $s/roofline/ceilings.cpp $s/model/cost_model.cpp" \
                   "$s/model/config.cpp $s/core/input_file.cpp $s/core/path_checks.cpp" \
                   "$s/core/utf8.cpp $root/tests/fuzz/fuzz_stubs.cpp" ;;
    report) echo "$s/report/report.cpp $s/report/report_values.cpp $s/report/plot.cpp" \
                 "$s/roofline/predict.cpp" \
                 "$s/roofline/ceilings.cpp $s/model/cost_model.cpp $s/core/format.cpp" \
                 "$s/core/input_file.cpp $s/core/path_checks.cpp $s/model/config.cpp" \
                 "$s/core/utf8.cpp $root/tests/fuzz/fuzz_stubs.cpp" ;;
    request) echo "$s/server/api.cpp $s/server/chat_template.cpp $s/model/gguf.cpp" \
                  "$s/model/mmap_file.cpp" ;;
    *) echo "fuzz.sh: unknown target $1" >&2; exit 2 ;;
  esac
}
for t in "${targets[@]}"; do
  echo "building fuzz_$t in $out"
  objs=()
  for src in $(sources_for "$t"); do objs+=("$(obj "$src")"); done
  "$cxx" "${cflags[@]}" -fsanitize=fuzzer -o "$out/fuzz_$t" "$root/tests/fuzz/fuzz_$t.cpp" \
    "${objs[@]}"
done
for t in "${targets[@]}"; do
  work="$out/corpus_$t"
  mkdir -p "$work"
  case "$t" in
    gguf | safetensors) cp "$root"/tests/corpus/*."$t" "$work"/ ;;
    *) cp "$root"/tests/corpus_json/"$t"/*.json "$work"/ ;;
  esac
  echo "running fuzz_$t for ${secs}s"
  # A finding is written to $out/crash_<target>-<hash> (reproduce: $out/fuzz_<target> FILE).
  "$out/fuzz_$t" -max_total_time="$secs" -max_len=32768 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$out/crash_$t-" -print_final_stats=1 "$work" 2>&1 | tail -n 12
done
echo "fuzz.sh: no crashes"
