#!/usr/bin/env python3
"""The openai Python client (AsyncOpenAI over httpx) timing N concurrent streams against a
server, measured the way Python benchmark clients do: perf_counter at the request and at each
streamed chunk. Prints one JSON object: ttft_ms and itl_ms samples, and the process CPU time.
Used by tests/load/test_load_client.cpp's benchmark (LATPROF_LOAD_BENCH_PY=1) to compare with
latprof load against the same stub server. Usage: openai_client_bench.py URL STREAMS REQUESTS TOKENS"""
import asyncio
import json
import sys
import time

import openai


async def main():
    url, streams, requests, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    ttft, itl = [], []
    queue = list(range(requests))

    async def worker():
        while queue:
            i = queue.pop()
            start = time.perf_counter()
            last = None
            stream = await client.completions.create(
                model="stub-model", prompt=[10 + (i + k) % 200 for k in range(8)],
                max_tokens=tokens, stream=True, extra_body={"ignore_eos": True})
            async for chunk in stream:
                if not chunk.choices or not chunk.choices[0].text:
                    continue
                now = time.perf_counter()
                if last is None:
                    ttft.append((now - start) * 1e3)
                else:
                    itl.append((now - last) * 1e3)
                last = now

    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(streams)))
    print(json.dumps({"ttft_ms": ttft, "itl_ms": itl, "cpu_s": time.process_time() - cpu0}))


asyncio.run(main())
