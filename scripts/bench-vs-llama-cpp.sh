#!/usr/bin/env bash
# latprof's CPU engine against llama.cpp's llama-bench on the same machine, same shapes (issue 17),
# interleaved per repetition: each repetition runs stream_read (a STREAM-style read written
# without latprof's code), then both tools on each dtype; a repetition's figures are judged against
# the mean of the stream_read samples either side of it, and the summary gives medians over them,
# then each repetition with latprof's own reads and cores' distance around its run.
#
# Usage: LLAMA_BENCH=/path/to/llama-bench scripts/bench-vs-llama-cpp.sh MODEL GGUF_F16 GGUF_Q8_0
#   MODEL: tinyllama-1.1b or llama-2-7b (latprof's built-in synthetic model of those shapes);
#   the GGUFs: the same shapes for llama.cpp (scripts/make-synthetic-gguf.py, then
#   `llama-quantize F16.gguf Q8_0.gguf Q8_0`). llama.cpp is built outside this repository.
#   BUILD_DIR (build), BENCH_DIR (where bench/stream_read is: build-bench, else BUILD_DIR), INPUT (500), OUTPUT (64),
#   THREADS (2), REPS (3), DTYPES ("fp16 int8"; one of them alone for long runs) override;
#   KV=int8 runs both tools on an int8 KV cache (latprof --kv-dtype int8; llama-bench -fa 1
#   -ctk q8_0 -ctv q8_0) instead of each one's default (fp16 / f16);
#   KEEP_TMP=1 keeps the raw JSON of every repetition (the folder is named on stderr).
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
dtypes=${DTYPES:-fp16 int8}
kv=${KV:-fp16}
case $kv in
  fp16) lb_kv=() ;;
  int8) lb_kv=(-fa 1 -ctk q8_0 -ctv q8_0) ;;
  *) echo "bench-vs-llama-cpp: KV takes fp16 or int8, not '$kv'" >&2; exit 2 ;;
esac
for d in $dtypes; do
  case $d in fp16 | int8) ;; *) echo "bench-vs-llama-cpp: DTYPES takes fp16 and/or int8, not '$d'" >&2; exit 2 ;; esac
done
command -v "$lb" >/dev/null || [ -x "$lb" ] || { echo "bench-vs-llama-cpp: llama-bench not found; set LLAMA_BENCH" >&2; exit 2; }
[ -x "$build/latprof" ] || { echo "bench-vs-llama-cpp: $build/latprof not found; build first" >&2; exit 2; }
[ -x "$bench/bench/stream_read" ] || { echo "bench-vs-llama-cpp: $bench/bench/stream_read not found; build the stream_read target (-DLATPROF_BENCHMARKS=ON)" >&2; exit 2; }
for f in "$f16" "$q8"; do [ -r "$f" ] || { echo "bench-vs-llama-cpp: cannot read $f" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] && echo "bench-vs-llama-cpp: raw results kept in $tmp" >&2 || rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads
# llama-bench before mid-2025 has no -d (depth): its decode at context INPUT is then taken from a
# prompt+generation test (-pg INPUT,OUTPUT) less the prompt-only test of the same repetition.
has_depth=0
# (The help text is read whole first: `grep -q` in a pipe under pipefail exits at the first match,
# llama-bench dies of SIGPIPE, and the test failed at random.)
lb_help=$("$lb" --help 2>&1 || true)
case $lb_help in *--n-depth*) has_depth=1 ;; esac
stream() { "$bench/bench/stream_read" 2048 7 | tee -a "$tmp/stream.txt" >&2; }
# Interleaved per repetition, so that both tools see the same memory system (its bandwidth drifts
# by a third within minutes on shared machines): stream_read, then for each dtype llama-bench
# (one repetition of pp and of tg) and latprof (one timed request), then stream_read again.
for r in $(seq 1 "$reps"); do
  echo "== repetition $r/$reps: stream_read" >&2; stream
  for d in $dtypes; do
    g=$f16; [ "$d" = int8 ] && g=$q8
    echo "== repetition $r: llama-bench $d" >&2
    "$lb" -m "$g" -p "$input" -n 0 -t "$threads" -r 1 ${lb_kv[@]+"${lb_kv[@]}"} -o json > "$tmp/lb-pp-$d-$r.json"
    if [ "$has_depth" = 1 ]; then
      "$lb" -m "$g" -p 0 -n "$output" -d "$input" -t "$threads" -r 1 ${lb_kv[@]+"${lb_kv[@]}"} -o json > "$tmp/lb-tg-$d-$r.json"
    else
      "$lb" -m "$g" -p 0 -n 0 -pg "$input,$output" -t "$threads" -r 1 ${lb_kv[@]+"${lb_kv[@]}"} -o json > "$tmp/lb-pg-$d-$r.json"
    fi
    echo "== repetition $r: latprof $model $d" >&2
    "$build/latprof" run --model "$model" --dtype "$d" --kv-dtype "$kv" --input "$input" \
      --output "$output" --threads "$threads" --repeat 1 --quiet --json "$tmp/lp-$d-$r.json" >/dev/null
  done
done
echo "== stream_read (after)" >&2; stream
python3 - "$tmp" "$model" "$reps" "$kv" $dtypes <<'PY'
import json, math, re, statistics, sys
tmp, model, reps, kv, dtypes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
bws = [float(m) * 1e9 for m in re.findall(r"best_GBps=([0-9.]+)", open(f"{tmp}/stream.txt").read())]
med = statistics.median
def stage(j, n): return next(s for s in j["stages"] if s["name"] == n)
def measured(x): return not math.isnan(x["lb_tg"])  # llama.cpp's decode (see below)
def roof(j, d):  # the matmul roof the report judges the dtype against (README, "Ceilings")
    c = j["ceilings"]
    if d == "int8" and c.get("int16_ops_per_s", 0) > 0:
        return c["int16_ops_per_s"]
    if d == "fp16":
        return max(c["matmul_flops_per_s"], c.get("f16_tile_flops_per_s", 0))
    return c["matmul_flops_per_s"]
rows = {d: [] for d in dtypes}
derived = False
unmeasured = 0
for r in range(1, reps + 1):
    bw = (bws[r - 1] + bws[r]) / 2  # the stream_read samples either side of this repetition
    for d in rows:
        j = json.load(open(f"{tmp}/lp-{d}-{r}.json"))
        pp = json.load(open(f"{tmp}/lb-pp-{d}-{r}.json"))[0]
        try:
            tg = json.load(open(f"{tmp}/lb-tg-{d}-{r}.json"))[0]
        except FileNotFoundError:  # no -d: generation time = (prompt + generation) - prompt
            pg = json.load(open(f"{tmp}/lb-pg-{d}-{r}.json"))[0]
            gen_ns = pg["avg_ns"] - pp["avg_ns"]
            # Not measurable when the prompt's run-to-run spread exceeds the generation time
            # (a long INPUT with a short OUTPUT): left out, not a negative or inflated rate.
            tg = dict(model_size=pp["model_size"],
                      avg_ts=pg["n_gen"] / (gen_ns / 1e9) if gen_ns > 0 else float("nan"))
            derived = True
            unmeasured += gen_ns <= 0
        dec, pre = stage(j, "decode"), stage(j, "prefill")
        lp_tg = (j["run"]["output_tokens"] - 1) / (dec["time_ms"] / 1e3)
        lp_pp = j["run"]["input_tokens"] / (pre["time_ms"] / 1e3)
        rows[d].append(dict(bw=bw, lp_tg=lp_tg, lb_tg=tg["avg_ts"], lp_pp=lp_pp, lb_pp=pp["avg_ts"],
                            lp_gbs=dec["bytes"] / (dec["time_ms"] / 1e3), lb_gbs=tg["avg_ts"] * tg["model_size"],
                            dec_bytes=dec["bytes"], dec_ms=dec["time_ms"],
                            fma=100 * pre["achieved_flops_per_s"] / roof(j, d),
                            cpu=j["machine"].get("cpu", ""), threads=j["run"]["threads"],
                            info=j["ceilings"].get("info", {}),
                            shift=any(c.get("subject") == "decode_step_ms" for c in j.get("checks", []))))
f = rows[dtypes[0]][0]
kv_text = "" if kv == "fp16" else ", int8 KV cache (llama.cpp: q8_0 K and V, flash attention)"
print(f"\n{model}, {f['threads']} threads, {f['cpu']}{kv_text}, {reps} interleaved repetition(s); medians over them")
print("stream_read (independent) at each repetition boundary: " + ", ".join(f"{b/1e9:.1f}" for b in bws) + " GB/s")
print(f"{'':6} {'decode tok/s latprof vs llama.cpp':>34} {'latprof % stream':>17} {'llama.cpp % stream*':>20} "
      f"{'prefill tok/s latprof vs llama.cpp':>35} {'prefill % roof**':>16}")
def tg_cols(rs):  # llama.cpp's decode columns over the repetitions where it was measured
    ok = [x for x in rs if measured(x)]
    if not ok:
        return f"{med([x['lp_tg'] for x in rs]):8.2f} vs     n/a {'':24}", "n/a"
    r = [x["lp_tg"] / x["lb_tg"] for x in ok]
    return (f"{med([x['lp_tg'] for x in rs]):8.2f} vs {med([x['lb_tg'] for x in ok]):7.2f} "
            f"({med(r):4.2f}x, per-rep {min(r):.2f}-{max(r):.2f})"), f"{med([100 * x['lb_gbs'] / x['bw'] for x in ok]):.1f}"
for d, rs in rows.items():
    lp_pp, lb_pp = med([x["lp_pp"] for x in rs]), med([x["lb_pp"] for x in rs])
    pp_ratio = med([x["lp_pp"] / x["lb_pp"] for x in rs])
    lp_pct = med([100 * x["lp_gbs"] / x["bw"] for x in rs])
    tg, lb_pct = tg_cols(rs)
    print(f"{d:6} {tg} "
          f"{lp_pct:16.1f}% {lb_pct:>19}% {lp_pp:8.1f} vs {lb_pp:7.1f} ({pp_ratio:4.2f}x, per-rep "
          f"{min(x['lp_pp']/x['lb_pp'] for x in rs):.2f}-{max(x['lp_pp']/x['lb_pp'] for x in rs):.2f}) "
          f"{med([x['fma'] for x in rs]):15.1f}%")
# Per token: FP16 time / INT8 time (same token count), against FP16 bytes / INT8 bytes.
if "fp16" in rows and "int8" in rows:
    speed = med([a["dec_ms"] / b["dec_ms"] for a, b in zip(rows["fp16"], rows["int8"])])
    byte_ratio = med([a["dec_bytes"] / b["dec_bytes"] for a, b in zip(rows["fp16"], rows["int8"])])
    lb = [b["lb_tg"] / a["lb_tg"] for a, b in zip(rows["fp16"], rows["int8"])
          if measured(a) and measured(b)]
    print(f"latprof INT8/FP16 decode speed {speed:.2f}x, byte ratio {byte_ratio:.2f}x ({speed/byte_ratio:.2f} of it); "
          f"llama.cpp Q8_0/F16 " + (f"{med(lb):.2f}x" if lb else "n/a"))
# Per repetition: a median over repetitions hides a window that flipped inside one; latprof's own
# reads around its run, how far apart its threads' cores were, and whether its decode steps
# changed speed (the report's warning) say which repetitions ran in one state.
print("per repetition: latprof decode tok/s, % of the stream_read around it; latprof's own reads "
      "before/after its run, its cores' distance before/after")
for r in range(reps):
    for d in rows:
        x = rows[d][r]
        i = x["info"]
        def g(k, scale=1.0):
            v = i.get(k)
            return f"{v / scale:.0f}" if isinstance(v, (int, float)) else "-"
        print(f"  rep {r + 1} {d:5} {x['lp_tg']:8.2f} tok/s {100 * x['lp_gbs'] / x['bw']:6.1f}%   reads "
              f"{g('read_bandwidth_before', 1e9)}/{g('read_bandwidth_after', 1e9)} GB/s   cores "
              f"{g('core_to_core_ns_before')}/{g('core_to_core_ns_after')} ns"
              + ("   its decode steps changed speed" if x["shift"] else ""))
if derived:
    print("llama.cpp decode from -pg INPUT,OUTPUT less -p INPUT (this llama-bench has no -d)")
if unmeasured:
    print(f"llama.cpp decode not measurable in {unmeasured} run(s): -pg took no longer than -p "
          "(the prompt's spread exceeds the generation); left out; raise OUTPUT")
print("* llama.cpp GB/s = tok/s x model file size (weights only; latprof's column adds KV-cache reads)")
print("** of the matmul roof the report judges the dtype against: FP16 the FP32 FMA peak, or a quarter of the AMX BF16 tile peak where the GEMM uses the tiles; INT8 the int16 dot-product peak where measured (VNNI), half the AMX INT8 tile peak where the GEMM uses the tiles")
PY
