"""Drives latprof serve with the openai Python client (as users do) and prints what it got as
JSON: a streamed completion (with usage), a non-streamed completion, a streamed chat and the
model list. Usage: openai_client.py PORT API_KEY"""
import json
import sys

from openai import OpenAI

port, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=60)
out = {}

text, chunks, usage = "", 0, None
for c in client.completions.create(model="tiny", prompt="ba keto lo", max_tokens=8,
                                   temperature=0, stream=True,
                                   stream_options={"include_usage": True},
                                   extra_body={"ignore_eos": True}):
    if c.choices:
        text += c.choices[0].text
        chunks += 1
    if c.usage:
        usage = c.usage.model_dump()
out["stream_text"], out["stream_chunks"], out["stream_usage"] = text, chunks, usage

r = client.completions.create(model="tiny", prompt="ba keto lo", max_tokens=8, temperature=0,
                              extra_body={"ignore_eos": True})
out["text"] = r.choices[0].text
out["usage"] = r.usage.model_dump()
out["latprof_timings"] = (r.model_extra or {}).get("latprof_timings")

chat = ""
for c in client.chat.completions.create(model="tiny", max_tokens=5, temperature=0, stream=True,
                                        messages=[{"role": "user", "content": "ba"}],
                                        extra_body={"ignore_eos": True}):
    if c.choices and c.choices[0].delta.content:
        chat += c.choices[0].delta.content
out["chat_text"] = chat
out["models"] = [m.id for m in client.models.list().data]
print(json.dumps(out))
