#!/usr/bin/env bash
# The one prepared check for a lent GPU (A100/H100/H200): build, GPU tests (the cuBLASLt callers
# must run, not skip: the CPU emulation of tests/cuemu cannot cover them), `latprof hw`, and
# `latprof run --input 500 --output 200` on llama-2-7b in FP16 and INT8, with and without
# --counters, without graphs and with --batch 4; reports go to $OUT when it is set; a summary
# table is printed at the end.
# Budget: < 8 minutes on an H200 machine with 16 cores. Every step's failure is reported and the
# script goes on; the exit code is the number of failed steps (0: all passed).
#
#   scripts/gpu-check.sh            # from the repository root
#   BUILD=build-gpu JOBS=16 scripts/gpu-check.sh
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
# CUDA architectures: the lent GPU's own (a quarter of the build time of the default 80;86;89;90),
# unless ARCHS is given; "default" builds the full set.
ARCHS=${ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')}
[ "$ARCHS" = default ] && ARCHS=
DEST=${OUT:-$BUILD/gpu-check}
mkdir -p "$DEST"
LOG="$DEST/gpu-check.log"
: >"$LOG"
START=$(date +%s)
FAILED=()
STATUS=()

step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  echo "=== [$name] $*" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  local dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    STATUS+=("ok    ${dt}s  $name")
  else
    STATUS+=("FAIL  ${dt}s  $name (exit $rc)")
    FAILED+=("$name")
    echo "--- [$name] failed with exit $rc; last lines:" | tee -a "$LOG"
    tail -n 25 "$LOG"
  fi
  return 0
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >>"$LOG" 2>&1 || true

CONF=(-DCMAKE_BUILD_TYPE=Release -DLATPROF_CUDA=ON -DLATPROF_BENCHMARKS=OFF)
[ -n "$ARCHS" ] && CONF+=("-DCMAKE_CUDA_ARCHITECTURES=$ARCHS")
step configure 120 cmake -S . -B "$BUILD" "${CONF[@]}"
step build 300 cmake --build "$BUILD" -j"$JOBS"
step gpu-tests 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 120
# cuBLASLt cannot run under the CPU emulation of the CUDA kernels (tests/cuemu, CI): its callers,
# the prefill GEMMs (FP16, and INT8 through dequantize_i8) and the ceilings' GEMM, are tested only
# here, so this step fails when any of their tests was skipped instead of run.
CUBLASLT_CALLERS='
  out=$("$1/test_gpu_ops" --gtest_filter="Shapes/GpuMatmul.*:GpuBackend.CeilingsAreMeasured" 2>&1); rc=$?
  fwd=$("$1/test_gpu_forward" 2>&1) || rc=1
  printf "%s\n%s\n" "$out" "$fwd"
  if grep -q "SKIPPED \]" <<<"$out$fwd"; then echo "cuBLASLt callers were skipped, not run"; rc=1; fi
  if ! grep -q "GpuMatmul.MatchesCpu/f16_m500" <<<"$out"; then echo "no prefill GEMM test ran"; rc=1; fi
  exit $rc'
step cublaslt-callers 150 bash -c "$CUBLASLT_CALLERS" _ "$BUILD"
# The engine's steps on the paged KV cache: attention (decode and tiled kernels over ragged steps
# with shuffled block tables), rope by positions, gather_rows, keyed sampling and the per-key
# graphs (captured, replayed, dropped and captured again) must run, not skip.
ENGINE_STEPS='
  out=$("$1/test_gpu_ops" --gtest_filter="Shapes/GpuAttention.*:GpuOps.*" 2>&1); rc=$?
  printf "%s\n" "$out"
  if grep -q "SKIPPED \]" <<<"$out"; then echo "engine-step tests were skipped, not run"; rc=1; fi
  for t in GpuOps.StepGraphsReplayMatchCpu GpuOps.GatherRows "GpuAttention.MatchesCpu/mixed_"; do
    grep -q "OK \] .*$t" <<<"$out" || { echo "$t did not pass"; rc=1; }
  done
  exit $rc'
step engine-steps 120 bash -c "$ENGINE_STEPS" _ "$BUILD"
# The emulated kernel tests also build and pass next to nvcc (they need only g++).
step cuemu-tests 120 ctest --test-dir "$BUILD" -L cuemu --output-on-failure --timeout 100 -j"$JOBS"
cp "$LOG" "$DEST/ctest-and-build.log" 2>/dev/null || true
step hw 60 "$BUILD/latprof" hw

RUNS=()
for dtype in fp16 int8; do
  step "run-$dtype" 120 "$BUILD/latprof" run --input 500 --output 200 --model llama-2-7b \
    --dtype "$dtype" --backend cuda -q --json "$DEST/run-$dtype.json"
  RUNS+=("$DEST/run-$dtype.json")
  step "run-$dtype-counters" 150 "$BUILD/latprof" run --input 500 --output 200 \
    --model llama-2-7b --dtype "$dtype" --backend cuda --counters -q \
    --json "$DEST/run-$dtype-counters.json"
  RUNS+=("$DEST/run-$dtype-counters.json")
done
step "run-fp16-no-graph" 120 "$BUILD/latprof" run --input 500 --output 200 --model llama-2-7b \
  --dtype fp16 --backend cuda --no-graph -q --json "$DEST/run-fp16-no-graph.json"
RUNS+=("$DEST/run-fp16-no-graph.json")
# Continuous batching: four requests through the engine (mixed prefill/decode steps, one graph
# per all-decode batch size).
step "run-fp16-batch4" 150 "$BUILD/latprof" run --input 500 --output 200 --model llama-2-7b \
  --dtype fp16 --backend cuda --batch 4 -q --json "$DEST/run-fp16-batch4.json"
RUNS+=("$DEST/run-fp16-batch4.json")

# ---- summary ----------------------------------------------------------------------------------
echo
echo "==== gpu-check summary ($(($(date +%s) - START)) s) ===="
for s in "${STATUS[@]}"; do echo "  $s"; done
python3 - "${RUNS[@]}" <<'PY' || echo "(summary table failed: python3 or report fields missing)"
import json, os, sys

def get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d

def fmt(v, unit="", scale=1.0, digits=2):
    return "-" if v is None else f"{v * scale:.{digits}f}{unit}"

def find_ceiling(r, key):
    # The measured GPU ceilings the backend reports (measure_ceilings_json), wherever the runner
    # put them.
    stack = [r]
    while stack:
        d = stack.pop()
        if isinstance(d, dict):
            if key in d and isinstance(d[key], (int, float)):
                return d[key]
            stack.extend(d.values())
        elif isinstance(d, list):
            stack.extend(d)
    return None

rows = []
for path in sys.argv[1:]:
    name = os.path.basename(path).removesuffix(".json")
    if not os.path.exists(path):
        rows.append((name, None, None, None, None, None, None, None, "no report"))
        continue
    try:
        r = json.load(open(path))
    except Exception as e:
        rows.append((name, None, None, None, None, None, None, None, f"bad json: {e}"))
        continue
    m = r.get("metrics", {})
    stages = {s.get("name"): s for s in r.get("stages", []) if isinstance(s, dict)}
    bw = find_ceiling(r, "memory_bandwidth_bytes_per_s")
    gemm = find_ceiling(r, "fp16_flops_per_s")
    dec = stages.get("decode", {})
    pre = stages.get("prefill", {})
    dec_gbps = None
    if dec.get("bytes") and dec.get("time_ms"):
        dec_gbps = dec["bytes"] / (dec["time_ms"] * 1e-3)
    elif dec.get("mbu") is not None and get(r, "roofline", "memory_bandwidth_bytes_per_s"):
        dec_gbps = dec["mbu"] * r["roofline"]["memory_bandwidth_bytes_per_s"]
    pre_flops = None
    if pre.get("flops") and pre.get("time_ms"):
        pre_flops = pre["flops"] / (pre["time_ms"] * 1e-3)
    counters = get(r, "profile", "counters")
    note = ""
    if isinstance(counters, dict):
        note = "counters: " + ("refused: " + str(counters.get("reason"))[:60]
                               if counters.get("available") is False
                               else f"{len(counters.get('counters', counters).get('ranges', []))} ranges")
    rows.append((name, m.get("ttft_ms"), m.get("tpot_ms"), m.get("e2e_ms"),
                 dec_gbps, bw, pre.get("mfu") if pre else m.get("mfu"),
                 (pre_flops / gemm) if (pre_flops and gemm) else None, note))

hdr = f"{'run':24} {'TTFT':>9} {'TPOT':>8} {'E2E':>9} {'dec GB/s':>9} {'copy GB/s':>9} {'%copy':>6} {'MFU pre':>8} {'%GEMM':>6}  notes"
print(hdr)
print("-" * len(hdr))
for (n, ttft, tpot, e2e, dgb, bw, mfu, pg, note) in rows:
    pct = (dgb / bw) if (dgb and bw) else None
    print(f"{n:24} {fmt(ttft,' ms'):>9} {fmt(tpot,' ms',digits=3):>8} {fmt(e2e,' ms',digits=1):>9} "
          f"{fmt(dgb,'',1e-9,0):>9} {fmt(bw,'',1e-9,0):>9} {fmt(pct,'%',100,0):>6} "
          f"{fmt(mfu,'%',100,1):>8} {fmt(pg,'%',100,0):>6}  {note}")
fp16 = {n: t for (n, _, t, *_rest) in rows}
if fp16.get("run-fp16") and fp16.get("run-int8"):
    print(f"INT8 decode speed-up over FP16: {fp16['run-fp16'] / fp16['run-int8']:.2f}x (target >= 1.6x)")
if fp16.get("run-fp16") and fp16.get("run-fp16-no-graph"):
    print(f"CUDA graph TPOT gain: {fp16['run-fp16-no-graph'] / fp16['run-fp16']:.2f}x (no-graph / graph)")
PY
if [ -n "${OUT:-}" ]; then cp "$LOG" "$OUT/" 2>/dev/null || true; fi
echo "failed steps: ${#FAILED[@]} ${FAILED[*]:-}"
exit ${#FAILED[@]}
