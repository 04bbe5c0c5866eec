#!/usr/bin/env bash
# The chunked-prefill trade-off (issue 13): decoding requests share steps with a long prompt that
# arrives while they run. A smaller --max-batched-tokens cuts the prompt into chunks, so the
# decodes' inter-token gaps stay short, at the cost of the long request's TTFT.
# Usage: scripts/bench-chunked-prefill.sh [BUILD_DIR] [MODEL] [THREADS] [BUDGETS...]
# Prints one line per budget: the decoders' ITL p50/p99/max and the long prompt's TTFT.
set -euo pipefail
bin="${1:-build}/latprof"
model="${2:-tinyllama-1.1b}"
threads="${3:-2}"
shift $(( $# >= 3 ? 3 : $# ))
budgets=("$@")
[ ${#budgets[@]} -eq 0 ] && budgets=(8192 512 256)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# 8 decoders (128-token prompts, 96 tokens each) at time 0; a 1,500-token prompt at 1.5 s.
{
  for i in 0 1 2 3 4 5 6 7; do echo '{"input_tokens": 128, "output_tokens": 96, "arrival_ms": 0}'; done
  echo '{"input_tokens": 1500, "output_tokens": 8, "arrival_ms": 1500}'
} > "$out/ds.jsonl"
echo "model $model, $threads threads, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average $(cut -d' ' -f1 /proc/loadavg)"
for b in "${budgets[@]}"; do
  "$bin" run --model "$model" --threads "$threads" --dataset "$out/ds.jsonl" --quiet \
    --max-batched-tokens "$b" --json "$out/r$b.json" > /dev/null
  python3 - "$out/r$b.json" "$b" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
gaps, long_ttft = [], None
for q in j["requests"]:
    if q["input_tokens"] >= 1500:
        long_ttft = q["ttft_ms"]
    else:
        gaps += q["itl_ms"]
gaps.sort()
pick = lambda p: gaps[min(len(gaps) - 1, int(p * (len(gaps) - 1) + 0.5))]
steps = j["steps"]
mixed = sum(1 for s in steps if s["prefill_tokens"] > 0 and s["decode_tokens"] > 0)
print(f"budget {sys.argv[2]:>5}: decoders ITL p50 {pick(0.5):8.1f} ms  p99 {pick(0.99):8.1f} ms  "
      f"max {gaps[-1]:8.1f} ms | long prompt TTFT {long_ttft:8.1f} ms | {len(steps)} steps, "
      f"{mixed} mixed prefill+decode")
PY
done
