#!/usr/bin/env python3
"""Writes a Llama-architecture GGUF with synthetic F16 weights at one of latprof's built-in shapes,
for running llama.cpp's llama-bench on exactly the shapes latprof runs (scripts/bench-vs-llama-cpp.sh).
The weights are small pseudo-random values (their values do not change a dense kernel's speed);
the vocabulary is placeholder tokens, enough for llama-bench, which feeds token ids.

Usage: scripts/make-synthetic-gguf.py MODEL OUT.gguf     (MODEL: tinyllama-1.1b or llama-2-7b)
Needs the `gguf` Python package (pip install gguf), which brings numpy."""
import sys

SHAPES = {
    # dim, layers, heads, kv heads, ffn, vocab, context, rope theta, norm eps
    "tinyllama-1.1b": (2048, 22, 32, 4, 5632, 32000, 2048, 10000.0, 1e-5),
    "llama-2-7b": (4096, 32, 32, 32, 11008, 32000, 4096, 10000.0, 1e-5),
}


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        print(f"usage: make-synthetic-gguf.py {{{','.join(SHAPES)}}} OUT.gguf", file=sys.stderr)
        return 2
    try:
        import gguf
        import numpy as np
    except ImportError:
        print("make-synthetic-gguf: needs the gguf package: pip install gguf", file=sys.stderr)
        return 2
    import os
    name, out = sys.argv[1], sys.argv[2]
    tmp = out + ".tmp"  # written whole, then renamed: never a half-written OUT
    dim, layers, heads, kv, ffn, vocab, ctx, theta, eps = SHAPES[name]
    hd = dim // heads
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"latprof synthetic {name}")
    w.add_context_length(ctx)
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    tokens += [f"t{i}".encode() for i in range(vocab - len(tokens))]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (vocab - 259)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    rng = np.random.default_rng(1)
    pool = (rng.standard_normal(1 << 22) * 0.02).astype(np.float16)  # 4 Mi values, tiled

    def mat(rows: int, cols: int) -> "np.ndarray":
        n = rows * cols
        reps = -(-n // pool.size)
        return np.tile(pool, reps)[:n].reshape(rows, cols)

    def norm() -> "np.ndarray":
        return np.ones(dim, dtype=np.float32)

    w.add_tensor("token_embd.weight", mat(vocab, dim))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm())
        w.add_tensor(p + "attn_q.weight", mat(dim, dim))
        w.add_tensor(p + "attn_k.weight", mat(kv * hd, dim))
        w.add_tensor(p + "attn_v.weight", mat(kv * hd, dim))
        w.add_tensor(p + "attn_output.weight", mat(dim, dim))
        w.add_tensor(p + "ffn_norm.weight", norm())
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, dim))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, dim))
        w.add_tensor(p + "ffn_down.weight", mat(dim, ffn))
    w.add_tensor("output_norm.weight", norm())
    w.add_tensor("output.weight", mat(vocab, dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=sys.stderr.isatty())
    w.close()
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
