#!/usr/bin/env python3
"""Independent NumPy reference forward pass of a Llama checkpoint in Hugging Face layout.

Written from the published Llama architecture (RMSNorm, rotary embeddings in the rotate_half
convention, grouped-query causal attention, SwiGLU feed-forward), not from latprof's C++. It
reads config.json and the *.safetensors files itself and computes in float64. Rope scaling
("linear", "llama3") follows Hugging Face transformers' modeling_rope_utils.py, and Mistral's
sliding window its attention mask (a query at position i sees keys j with i - W < j <= i).

  python3 tests/reference/llama_ref.py --model DIR --tokens 1,5,9 --steps 4

prints JSON: {"logits_last": [...], "greedy": [...], "margins": [...]} where logits_last are the
logits after the last prompt token, greedy the next `steps` argmax tokens, and margins the gap
between the best and second-best logit at each greedy step.
"""
import argparse
import glob
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = data[base + begin : base + end]
        dt = e["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: tensor {name} has unsupported dtype {dt}")
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        files = [os.path.join(model_dir, x) for x in files]
    else:
        files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    w = {}
    for p in files:
        w.update(read_safetensors(p))
    return cfg, w


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_inv_freq(cfg, hd):
    """inv_freq as transformers' ROPE_INIT_FUNCTIONS compute it, in float64."""
    theta = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / rs["factor"]
    if kind == "llama3":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old_len = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * np.pi / inv_freq
        out = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, out)
    raise SystemExit(f"rope_scaling type {kind} is not in this reference")


def forward(cfg, w, tokens):
    dim = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_heads)
    hd = dim // n_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(tokens)
    emb = w["model.embed_tokens.weight"]
    x = emb[np.array(tokens)]
    pos = np.arange(T, dtype=np.float64)
    inv_freq = rope_inv_freq(cfg, hd)
    ang = np.outer(pos, inv_freq)  # [T, hd/2]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    window = cfg.get("sliding_window") if cfg.get("model_type") == "mistral" else None
    if window:
        mask = mask + np.tril(np.full((T, T), -np.inf), k=-window)  # keys j <= i - W hidden
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, n_heads, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, n_kv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, n_kv, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = n_heads // n_kv
        out = np.empty((T, n_heads, hd))
        for hh in range(n_heads):
            kh = hh // group
            s = q[:, hh, :] @ k[:, kh, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            out[:, hh, :] = s @ v[:, kh, :]
        x = x + out.reshape(T, dim) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1.0 + np.exp(-g))) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head = emb
    return x @ head.T  # [T, vocab]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face directory")
    ap.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--steps", type=int, default=4, help="greedy tokens to generate")
    a = ap.parse_args()
    cfg, w = load(a.model)
    tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
    if not tokens:
        raise SystemExit("--tokens is empty")
    logits = forward(cfg, w, tokens)
    result = {"logits_last": logits[-1].tolist(), "greedy": [], "margins": []}
    seq = list(tokens)
    last = logits[-1]
    for _ in range(a.steps):
        order = np.argsort(-last, kind="stable")
        result["greedy"].append(int(order[0]))
        result["margins"].append(float(last[order[0]] - last[order[1]]))
        seq.append(int(order[0]))
        last = forward(cfg, w, seq)[-1]
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
