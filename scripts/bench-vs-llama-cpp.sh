#!/usr/bin/env bash
# latprof's CPU engine against llama.cpp's llama-bench on the same machine, same shapes, in one
# run (issue 17), with the read bandwidth measured by bench/stream_read (a STREAM-style read
# written without latprof's code) just before and just after, averaged.
#
# Usage: LLAMA_BENCH=/path/to/llama-bench scripts/bench-vs-llama-cpp.sh MODEL GGUF_F16 GGUF_Q8_0
#   MODEL: tinyllama-1.1b or llama-2-7b (latprof's built-in synthetic model of those shapes);
#   the GGUFs: the same shapes for llama.cpp (scripts/make-synthetic-gguf.py, then
#   `llama-quantize F16.gguf Q8_0.gguf Q8_0`). llama.cpp is built outside this repository.
#   BUILD_DIR (build), BENCH_DIR (where bench/stream_read is: build-bench, else BUILD_DIR), INPUT (500), OUTPUT (64),
#   THREADS (2), REPS (3) override.
# Decode is measured at context INPUT (llama-bench: tg OUTPUT at depth INPUT; latprof: the decode
# of a request of INPUT prompt tokens), prefill as INPUT prompt tokens (llama-bench pp INPUT).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: LLAMA_BENCH=... $0 MODEL GGUF_F16 GGUF_Q8_0" >&2; exit 2; }
model=$1 f16=$2 q8=$3
lb=${LLAMA_BENCH:-llama-bench}
build=${BUILD_DIR:-build}
bench=${BENCH_DIR:-build-bench}
[ -x "$bench/bench/stream_read" ] || [ -n "${BENCH_DIR:-}" ] || bench=$build  # README builds have it
input=${INPUT:-500}
output=${OUTPUT:-64}
threads=${THREADS:-2}
reps=${REPS:-3}
command -v "$lb" >/dev/null || [ -x "$lb" ] || { echo "bench-vs-llama-cpp: llama-bench not found; set LLAMA_BENCH" >&2; exit 2; }
[ -x "$build/latprof" ] || { echo "bench-vs-llama-cpp: $build/latprof not found; build first" >&2; exit 2; }
[ -x "$bench/bench/stream_read" ] || { echo "bench-vs-llama-cpp: $bench/bench/stream_read not found; build the stream_read target (-DLATPROF_BENCHMARKS=ON)" >&2; exit 2; }
for f in "$f16" "$q8"; do [ -r "$f" ] || { echo "bench-vs-llama-cpp: cannot read $f" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads
stream() { "$bench/bench/stream_read" 2048 7 | tee -a "$tmp/stream.txt" >&2; }
echo "== stream_read (before)" >&2; stream
echo "== llama-bench" >&2
"$lb" -m "$f16,$q8" -p "$input" -n 0 -t "$threads" -r "$reps" -o json > "$tmp/lb-pp.json"
"$lb" -m "$f16,$q8" -p 0 -n "$output" -d "$input" -t "$threads" -r "$reps" -o json > "$tmp/lb-tg.json"
for d in fp16 int8; do
  echo "== latprof $model $d" >&2
  "$build/latprof" run --model "$model" --dtype "$d" --input "$input" --output "$output" \
    --threads "$threads" --repeat "$reps" --quiet --json "$tmp/lp-$d.json" >/dev/null
done
echo "== stream_read (after)" >&2; stream
python3 - "$tmp" "$model" <<'PY'
import json, re, statistics, sys
tmp, model = sys.argv[1], sys.argv[2]
bws = [float(m) for m in re.findall(r"best_GBps=([0-9.]+)", open(f"{tmp}/stream.txt").read())]
bw = statistics.mean(bws) * 1e9
lb = {}
for kind in ("pp", "tg"):
    for e in json.load(open(f"{tmp}/lb-{kind}.json")):
        d = "fp16" if "F16" in e["model_type"] else "int8"
        lb[(d, kind)] = (e["avg_ts"], e["stddev_ts"], e["model_size"])
lp = {d: json.load(open(f"{tmp}/lp-{d}.json")) for d in ("fp16", "int8")}
def stage(j, n): return next(s for s in j["stages"] if s["name"] == n)
fma = lp["fp16"]["ceilings"]["matmul_flops_per_s"]
print(f"\n{model}, {lp['fp16']['run']['threads']} threads, {lp['fp16']['machine'].get('cpu', '')}")
print(f"stream_read (independent) before/after: {bws[0]:.1f} / {bws[1]:.1f} GB/s, mean {bw/1e9:.1f} GB/s; "
      f"latprof's own probe in the runs: " + ", ".join(
          f"{d} {j['ceilings']['info'].get('read_bandwidth_before', 0)/1e9:.1f}/{j['ceilings']['info'].get('read_bandwidth_after', 0)/1e9:.1f}"
          for d, j in lp.items()) + " GB/s")
print(f"{'':6} {'decode tok/s':>24} {'latprof GB/s':>13} {'% stream':>9} {'llama.cpp GB/s*':>16} {'% stream':>9} {'prefill tok/s':>26} {'% FMA':>6}")
for d, j in lp.items():
    dec, pre = stage(j, "decode"), stage(j, "prefill")
    n_dec = j["run"]["output_tokens"] - 1
    lp_tg = n_dec / (dec["time_ms"] / 1e3)
    lp_pp = j["run"]["input_tokens"] / (pre["time_ms"] / 1e3)
    lp_gbs = dec["bytes"] / (dec["time_ms"] / 1e3)
    tg, tg_sd, size = lb[(d, "tg")]
    pp, pp_sd, _ = lb[(d, "pp")]
    lb_gbs = tg * size  # weights only: a lower bound of what llama.cpp moves per token
    print(f"{d:6} {lp_tg:7.2f} vs {tg:6.2f}±{tg_sd:4.2f} ({lp_tg/tg:4.2f}x) {lp_gbs/1e9:13.1f} {100*lp_gbs/bw:8.1f}% "
          f"{lb_gbs/1e9:16.1f} {100*lb_gbs/bw:8.1f}% {lp_pp:7.1f} vs {pp:6.1f}±{pp_sd:4.1f} ({lp_pp/pp:4.2f}x) "
          f"{100*pre['achieved_flops_per_s']/fma:5.1f}%")
r = (stage(lp['fp16'], 'decode')['time_ms']) / stage(lp['int8'], 'decode')['time_ms']
bytes_ratio = stage(lp['fp16'], 'decode')['bytes'] / stage(lp['int8'], 'decode')['bytes']
print(f"latprof INT8/FP16 decode speed {r:.2f}x, byte ratio {bytes_ratio:.2f}x ({r/bytes_ratio:.2f} of it); "
      f"llama.cpp Q8_0/F16 {lb[('int8','tg')][0]/lb[('fp16','tg')][0]:.2f}x")
print("* llama.cpp GB/s = tok/s x model file size (weights only; latprof's column adds KV-cache reads)")
PY
