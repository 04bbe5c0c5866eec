#!/usr/bin/env bash
# Batched decode on the continuous-batching engine: output tokens/s of B requests decoding
# together against one request alone (issue 13's target: 8 requests >= 4x one on tinyllama-1.1b
# with 2 threads). Runs `latprof run --batch 1` and `--batch B` alternately, ROUNDS times per
# binary (binaries alternate too, so a drift of the machine's memory bandwidth within minutes
# hits every variant alike), and reads the pure decode steps (no prefill token) from the JSON
# `steps[]`: tokens/s = decode tokens / step time, median over the steps of all rounds.
# Usage: scripts/bench-batch-decode.sh [BUILD_DIR ...]   (default: build)
#   MODEL (tinyllama-1.1b), DTYPE (fp16; several, space-separated, alternate within each round:
#   DTYPE="int8 int8-w8a8"), BATCH (8), INPUT (128), OUTPUT (64), THREADS (2), ROUNDS (3)
#   override.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-tinyllama-1.1b}
read -r -a dtypes <<<"${DTYPE:-fp16}"
for d in "${dtypes[@]}"; do
  case "$d" in fp16 | int8 | int8-w8a8) ;; *) echo "bench-batch-decode: DTYPE '$d' unknown; use fp16, int8 or int8-w8a8" >&2; exit 2 ;; esac
done
batch=${BATCH:-8}
input=${INPUT:-128}
output=${OUTPUT:-64}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
[ $# -gt 0 ] || set -- build
for b in "$@"; do
  [ -x "$b/latprof" ] || { echo "bench-batch-decode: $b/latprof not found; build first (see README.md)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for b in "$@"; do
    for d in "${dtypes[@]}"; do
      tag=$(echo "$b" | tr '/' '_')-$d
      for n in 1 "$batch"; do
        echo "== round $r: $b $d batch $n" >&2
        "$b/latprof" run --model "$model" --dtype "$d" --input "$input" --output "$output" \
          --batch "$n" --repeat 1 --threads "$threads" --json "$tmp/$tag-b$n-r$r.json" >/dev/null
      done
    done
  done
done
python3 - "$tmp" "$batch" "${dtypes[*]}" "$@" <<'PY'
import glob, json, statistics, sys
tmp, batch, dtypes, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
def steps(tag, n):
    out = []
    for f in sorted(glob.glob(f"{tmp}/{tag}-b{n}-r*.json")):
        j = json.load(open(f))
        out += [s["time_ms"] for s in j["steps"] if s["prefill_tokens"] == 0 and s["decode_tokens"] == n]
    return out
print(f"{'build':24} {'dtype':10} {'1 req: step ms':>15} {'tok/s':>7} {f'{batch} req: step ms':>16} {'tok/s':>7} {'ratio':>6}")
for b in builds:
  for d in dtypes:
    tag = b.replace("/", "_") + "-" + d
    s1, sb = steps(tag, 1), steps(tag, batch)
    m1, mb = statistics.median(s1), statistics.median(sb)
    t1, tb = 1e3 / m1, batch * 1e3 / mb
    print(f"{b:24} {d:10} {m1:15.1f} {t1:7.1f} {mb:16.1f} {tb:7.1f} {tb / t1:6.2f}   "
          f"(steps: {len(s1)} and {len(sb)}; spread {min(s1):.1f}-{max(s1):.1f} / {min(sb):.1f}-{max(sb):.1f} ms)")
PY
