#!/usr/bin/env python3
"""Measures latprof serve's own costs (issue 15, "Speed"), standard library only:

  overhead  N concurrent streams: the server's per-token serialize-and-send time (each chunk's
            JSON and socket write, measured on the server: --jsonl stream_write_ms / tokens)
            against each request's TPOT (from the server's token stamps), and the engine-thread
            detokenize time per token
  refuse    requests per second the gateway alone answers 401 (keep-alive connections; the
            client shares the machine, so this is a floor)
  idle      resident memory per idle keep-alive connection (VmRSS before and after opening them)

Usage: scripts/serve-bench.py [--latprof build/latprof] [--model tinyllama-1.1b] [--streams 32]
       [--tokens 32] [--threads 0] [--connections 200]"""
import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def start(latprof, args):
    p = subprocess.Popen([latprof, "serve", "--host", "127.0.0.1", "--port", "0"] + args,
                         stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if "listening on http://127.0.0.1:" in line:
            return p, int(line.strip().rsplit(":", 1)[1])
    sys.exit("latprof serve did not start")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stream_one(port, prompt_len, tokens, out, i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": [5 + (i * 7 + k) % 200 for k in range(prompt_len)],
                       "max_tokens": tokens, "ignore_eos": True, "stream": True,
                       "temperature": 0})
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    out[i] = (r.status, data.count("data: "))
    c.close()


def overhead(a):
    with tempfile.TemporaryDirectory() as d:
        jsonl = os.path.join(d, "requests.jsonl")
        p, port = start(a.latprof, ["--model", a.model, "--threads", str(a.threads),
                                    "--max-model-len", "256", "--kv-cache-memory", "256MiB",
                                    "--max-batched-tokens", "512", "--jsonl", jsonl])
        out = [None] * a.streams
        t0 = time.time()
        ts = [threading.Thread(target=stream_one, args=(port, 16, a.tokens, out, i))
              for i in range(a.streams)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        time.sleep(0.5)
        stop(p)
        rows = [json.loads(line) for line in open(jsonl)]
    assert all(o[0] == 200 for o in out), out
    ratios, per_tok_write, per_tok_detok, tpots = [], [], [], []
    for r in rows:
        tok = r["token_ms"]
        tpot = (tok[-1] - tok[0]) / (len(tok) - 1)
        w = r["stream_write_ms"] / r["completion_tokens"]
        ratios.append(w / tpot)
        tpots.append(tpot)
        per_tok_write.append(w)
        per_tok_detok.append(r["latprof_timings"]["detokenize_ms"] / r["completion_tokens"])
    print(f"overhead: {a.model}, {a.streams} streams x {a.tokens} tokens in {wall:.1f} s")
    print(f"  TPOT median {statistics.median(tpots):.2f} ms")
    print(f"  serialize+send per token (connection threads, overlapped with decode): median "
          f"{statistics.median(per_tok_write) * 1e3:.1f} us, max {max(per_tok_write) * 1e3:.1f} us"
          f" = {statistics.median(ratios) * 100:.3f}% of TPOT (max {max(ratios) * 100:.3f}%)")
    print(f"  detokenize per token (engine thread, on the critical path): median "
          f"{statistics.median(per_tok_detok) * 1e3:.1f} us")


def refuse(a):
    p, port = start(a.latprof, ["--model", "tiny", "--threads", "1", "--api-key", "secret"])
    n = [0, 0]
    stop_at = time.time() + a.seconds

    def loop(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while time.time() < stop_at:
            c.request("POST", "/v1/completions", '{"prompt":"x"}',
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            assert r.status == 401
            n[k] += 1
        c.close()

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
    t0, c0 = time.time(), cpu_s(p.pid)
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rate = sum(n) / (time.time() - t0)
    per = (cpu_s(p.pid) - c0) / sum(n)
    stop(p)
    print(f"refuse: {rate:.0f} requests/s answered 401 over {a.seconds} s "
          f"(2 keep-alive client connections on the same {os.cpu_count()} cores: a floor); "
          f"server CPU {per * 1e6:.0f} us per refusal, i.e. {1 / per:.0f} refusals/s per core")


def idle(a):
    p, port = start(a.latprof, ["--model", "tiny", "--threads", "1",
                                "--max-connections", str(a.connections + 8)])
    time.sleep(0.5)
    before = rss_kib(p.pid)
    conns = []
    for _ in range(a.connections):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/health")
        c.getresponse().read()
        conns.append(c)  # kept open: each holds a connection thread (keep-alive)
    time.sleep(0.5)
    after = rss_kib(p.pid)
    for c in conns:
        c.close()
    stop(p)
    print(f"idle: {a.connections} idle keep-alive connections: VmRSS {before} -> {after} KiB, "
          f"{(after - before) / a.connections:.1f} KiB per connection")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latprof", default="build/latprof")
    ap.add_argument("--model", default="tinyllama-1.1b")
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("what", nargs="*", default=["overhead", "refuse", "idle"])
    a = ap.parse_args()
    for w in a.what:
        {"overhead": overhead, "refuse": refuse, "idle": idle}[w](a)


if __name__ == "__main__":
    main()
