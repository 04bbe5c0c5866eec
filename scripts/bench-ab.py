#!/usr/bin/env python3
"""Two builds' Google Benchmark binaries (e.g. bench_kernels before and after a change) run in
turn, round after round, on the same benchmarks: the machine's speed drifts by a fifth within
minutes on the VMs these kernels are tuned on, so only runs interleaved in time compare. Prints,
per benchmark, each build's median real time with its range and the ratio of the medians.

Usage: scripts/bench-ab.py [--rounds N] [--min-time T] FILTER OLD_BIN NEW_BIN
  FILTER: a --benchmark_filter regex (e.g. 'BM_GemmAmx/type:0/'); --rounds (3), --min-time
  (--benchmark_min_time per run, 1). The order alternates each round (old, new; new, old; ...).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def fail(msg):
    print(f"bench-ab: {msg}", file=sys.stderr)
    sys.exit(2)


def run(binary, flt, min_time):
    cmd = [binary, f"--benchmark_filter={flt}", f"--benchmark_min_time={min_time}",
           "--benchmark_format=json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        fail(f"{binary} exited with {p.returncode}: {tail}")
    if "Failed to match any benchmarks" in p.stderr:
        fail(f"no benchmark of {binary} matches '{flt}'")
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        fail(f"{binary} did not print Google Benchmark JSON; is it a benchmark binary?")
    times = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or "real_time" not in b:
            continue
        times[b["name"]] = (float(b["real_time"]), b.get("time_unit", "ns"))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", default="1")
    ap.add_argument("filter")
    ap.add_argument("old")
    ap.add_argument("new")
    a = ap.parse_args()
    if a.rounds < 1:
        fail("--rounds must be at least 1")
    for b in (a.old, a.new):
        if not (os.path.isfile(b) and os.access(b, os.X_OK)):
            fail(f"{b} is not an executable file; give the two builds' bench binaries")
    samples = {"old": {}, "new": {}}
    units = {}
    tty = sys.stderr.isatty()
    for r in range(a.rounds):
        order = [("old", a.old), ("new", a.new)]
        if r % 2:
            order.reverse()
        for tag, binary in order:
            if tty:
                print(f"\rbench-ab: round {r + 1}/{a.rounds}, {tag} build ...   ", end="",
                      file=sys.stderr, flush=True)
            for name, (t, unit) in run(binary, a.filter, a.min_time).items():
                samples[tag].setdefault(name, []).append(t)
                units[name] = unit
    if tty:
        print(file=sys.stderr)
    names = [n for n in samples["old"] if n in samples["new"]]
    if not names:
        fail(f"no benchmark that both binaries run matches '{a.filter}'")
    width = max(len(n) for n in names)
    print(f"{'benchmark':<{width}}  {'old median [range]':>26}  {'new median [range]':>26}  new/old")
    for n in names:
        o, w = samples["old"][n], samples["new"][n]
        mo, mn = statistics.median(o), statistics.median(w)
        cell = lambda m, xs: f"{m:.4g} [{min(xs):.4g}-{max(xs):.4g}] {units[n]}"
        print(f"{n:<{width}}  {cell(mo, o):>26}  {cell(mn, w):>26}  {mn / mo:.3f}x")
    print(f"({a.rounds} rounds, alternating; times are Google Benchmark's real_time)")


if __name__ == "__main__":
    main()
