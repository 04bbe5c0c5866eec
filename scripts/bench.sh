#!/usr/bin/env bash
# The default-model benchmark: `latprof run --input 500 --output 200` in FP16 and INT8, keeping
# the JSON reports under reports/ and printing the figures the speed targets are judged by.
# Usage: scripts/bench.sh [extra latprof run flags]   (BUILD_DIR, MODEL, INPUT, OUTPUT override)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
model=${MODEL:-llama-2-7b}
input=${INPUT:-500}
output=${OUTPUT:-200}
bin="$build/latprof"
[ -x "$bin" ] || { echo "bench: $bin not found; build first (see README.md)" >&2; exit 2; }
mkdir -p reports
host=$(hostname -s)
# The independent STREAM-style read (bench/stream_read, built with -DLATPROF_BENCHMARKS=ON) just
# before and just after, when it is there: the memory roof the runs are judged against drifts.
stream=${STREAM_READ:-build-bench/bench/stream_read}
[ -x "$stream" ] || stream="$build/bench/stream_read"
stream_read() { if [ -x "$stream" ]; then "$stream" 2048 5 | tee -a "reports/bench-$model-stream-$host.txt" >&2; fi; }
rm -f "reports/bench-$model-stream-$host.txt"
stream_read
for dtype in fp16 int8; do
  out="reports/bench-$model-$dtype-$host.json"
  echo "== $model $dtype: latprof run --input $input --output $output" >&2
  "$bin" run --model "$model" --dtype "$dtype" --input "$input" --output "$output" --json "$out" "$@"
done
stream_read
python3 - "$model" "$host" <<'PY'
import json, os, re, sys
model, host = sys.argv[1], sys.argv[2]
sf = f"reports/bench-{model}-stream-{host}.txt"
if os.path.exists(sf):
    bws = [float(x) for x in re.findall(r"best_GBps=([0-9.]+)", open(sf).read())]
    if bws:
        print(f"stream_read (independent) before/after: {' / '.join(f'{b:.1f}' for b in bws)} GB/s")
r = {d: json.load(open(f"reports/bench-{model}-{d}-{host}.json")) for d in ("fp16", "int8")}
def stage(j, n): return next(s for s in j["stages"] if s["name"] == n)
bw = r["fp16"]["ceilings"]["mem_bw_bytes_per_s"]
fma = r["fp16"]["ceilings"]["matmul_flops_per_s"]
print(f"\nceilings: read bandwidth {bw/1e9:.1f} GB/s, FP32 FMA peak {fma/1e9:.0f} GFLOP/s")
print(f"{'dtype':6} {'TTFT ms':>10} {'TPOT ms':>10} {'E2E s':>8} {'decode GB/s':>12} {'% of BW':>8} {'prefill GFLOP/s':>16} {'% of FMA':>9}")
for d, j in r.items():
    dec, pre = stage(j, "decode"), stage(j, "prefill")
    print(f"{d:6} {j['metrics']['ttft_ms']:10.1f} {j['metrics']['tpot_ms']:10.1f} {j['metrics']['e2e_ms']/1e3:8.1f} "
          f"{dec['achieved_bytes_per_s']/1e9:12.2f} {100*dec['mbu']:7.1f}% "
          f"{pre['achieved_flops_per_s']/1e9:16.1f} {100*pre['achieved_flops_per_s']/fma:8.1f}%")
sp = stage(r["fp16"], "decode")["time_ms"] / stage(r["int8"], "decode")["time_ms"]
print(f"INT8 decode speed-up over FP16: {sp:.2f}x")
PY
