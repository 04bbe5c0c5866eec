#!/usr/bin/env python3
"""Writes the small seed corpus of GGUF and safetensors files in tests/corpus/.

good_*: valid files (seeds the fuzzers mutate); bad_*: each breaks one rule and must be
rejected with a UsageError (tests/model/test_model_corpus.cpp checks both). Every file is
well under 4 KB.  Usage: scripts/make-fuzz-corpus.py [OUT_DIR]
"""
import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "corpus")

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, payload):
    return gstr(key) + struct.pack("<I", typ) + payload


def kv_u32(k, v):
    return kv(k, U32, struct.pack("<I", v))


def kv_str(k, v):
    return kv(k, STR, gstr(v))


def kv_arr_str(k, items):
    return kv(k, ARR, struct.pack("<IQ", STR, len(items)) + b"".join(gstr(x) for x in items))


def kv_arr_f32(k, items):
    return kv(k, ARR, struct.pack("<IQ", F32, len(items)) + b"".join(struct.pack("<f", x) for x in items))


def gguf(kvs, tensors, version=3, align=32, n_tensors=None, n_kv=None):
    """tensors: (name, dims, type, data bytes, offset or None)."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = b"".join(kvs)
    infos = b""
    data = b""
    for name, dims, typ, payload, off in tensors:
        o = len(data) if off is None else off
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", typ, o)
        data += payload
        data += b"\0" * (-len(data) % align)
    out = head + body + infos
    out += b"\0" * (-len(out) % align)
    return out + data


def f16(vals):
    return b"".join(struct.pack("<e", v) for v in vals)


BASE_KV = [kv_str("general.architecture", "llama"), kv_u32("llama.embedding_length", 32),
           kv_u32("llama.block_count", 1), kv_u32("llama.attention.head_count", 2),
           kv_str("tokenizer.ggml.model", "llama"),
           kv_arr_str("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "\u2581a", "b"]),
           kv_arr_f32("tokenizer.ggml.scores", [0, 0, 0, -1, -2])]
EMB = ("token_embd.weight", [32, 5], 1, f16([0.5] * 160), None)
Q8 = ("blk.0.attn_q.weight", [32, 2], 8, (struct.pack("<e", 0.1) + bytes(range(32))) * 2, None)


def safetensors(header, data=b"", n=None):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if n is None else n) + h + data


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {}
    good = gguf(BASE_KV, [EMB, Q8])
    files["good_tiny.gguf"] = good
    files["good_no_tensors.gguf"] = gguf([kv_str("general.name", "x")], [])
    files["bad_magic.gguf"] = b"GGUG" + good[4:]
    files["bad_version.gguf"] = gguf(BASE_KV, [EMB], version=7)
    files["bad_truncated_header.gguf"] = good[:20]
    files["bad_truncated_kv.gguf"] = good[:90]
    files["bad_truncated_data.gguf"] = good[:-40]  # past the padding, into Q8_0 data
    files["bad_tensor_count.gguf"] = gguf(BASE_KV, [EMB], n_tensors=1 << 62)
    files["bad_kv_count.gguf"] = gguf(BASE_KV, [EMB], n_kv=1 << 40)
    files["bad_string_length.gguf"] = good[:24] + struct.pack("<Q", 1 << 61) + good[32:]
    files["bad_array_length.gguf"] = gguf(
        [kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 1 << 50))], [])
    files["bad_value_type.gguf"] = gguf([kv("x", 99, b"\0" * 8)], [])
    files["bad_nested_array.gguf"] = gguf(
        [kv("x", ARR, struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", ARR, 1) +
            struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", U8, 0))], [])
    files["bad_bool.gguf"] = gguf([kv("x", BOOL, b"\x07")], [])
    files["bad_quant_type.gguf"] = gguf(BASE_KV, [("blk.0.attn_q.weight", [256, 2], 13, b"\0" * 352, None)])
    files["bad_offset_past_end.gguf"] = gguf(BASE_KV, [("token_embd.weight", [32, 5], 1, b"", 1 << 40)])
    files["bad_offset_unaligned.gguf"] = gguf(BASE_KV, [("token_embd.weight", [32, 5], 1, f16([0] * 160), 3)])
    files["bad_dims.gguf"] = gguf(BASE_KV, [("t", [1 << 40, 1 << 40], 0, b"", None)])
    files["bad_zero_dim.gguf"] = gguf(BASE_KV, [("t", [0], 0, b"", None)])
    files["bad_ndims.gguf"] = gguf(BASE_KV, [("t", [1] * 9, 0, b"\0" * 4, None)])
    files["bad_q8_row.gguf"] = gguf(BASE_KV, [("t", [33], 8, b"\0" * 68, None)])
    files["bad_alignment.gguf"] = gguf([kv_u32("general.alignment", 24)], [])
    files["bad_duplicate_key.gguf"] = gguf([kv_u32("a", 1), kv_u32("a", 2)], [])

    t = {"a": {"dtype": "F16", "shape": [2, 4], "data_offsets": [0, 16]},
         "b": {"dtype": "F32", "shape": [3], "data_offsets": [16, 28]},
         "__metadata__": {"format": "pt"}}
    data = bytes(range(28))
    files["good_tiny.safetensors"] = safetensors(t, data)
    files["good_empty.safetensors"] = safetensors({})
    files["bad_header_len_huge.safetensors"] = safetensors(t, data, n=1 << 60)
    files["bad_header_len_past_end.safetensors"] = safetensors(t, data, n=4000)
    files["bad_truncated.safetensors"] = b"\x10\0\0"
    files["bad_not_json.safetensors"] = struct.pack("<Q", 8) + b"{{{{{{{{"
    files["bad_not_object.safetensors"] = struct.pack("<Q", 8) + b"[1,2,3] "
    files["bad_offsets_outside.safetensors"] = safetensors(
        {"a": {"dtype": "F16", "shape": [2, 4], "data_offsets": [0, 160]}}, data)
    files["bad_offsets_reversed.safetensors"] = safetensors(
        {"a": {"dtype": "F16", "shape": [0], "data_offsets": [16, 0]}}, data)
    files["bad_shape_mismatch.safetensors"] = safetensors(
        {"a": {"dtype": "F16", "shape": [3, 4], "data_offsets": [0, 16]}}, data)
    files["bad_shape_absurd.safetensors"] = safetensors(
        {"a": {"dtype": "F16", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 16]}}, data)
    files["bad_shape_negative.safetensors"] = safetensors(
        {"a": {"dtype": "F16", "shape": [-8], "data_offsets": [0, 16]}}, data)
    files["bad_dtype.safetensors"] = safetensors(
        {"a": {"dtype": "Q4", "shape": [8], "data_offsets": [0, 16]}}, data)
    files["bad_overlap.safetensors"] = safetensors(
        {"a": {"dtype": "F16", "shape": [8], "data_offsets": [0, 16]},
         "b": {"dtype": "F16", "shape": [8], "data_offsets": [8, 24]}}, data)
    files["bad_missing_fields.safetensors"] = safetensors({"a": {"dtype": "F16"}}, data)
    files["bad_deep_json.safetensors"] = safetensors({"a": json.loads("[" * 200 + "]" * 200)}, data)

    for name, b in sorted(files.items()):
        assert len(b) < 4096, (name, len(b))
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)
    print(f"wrote {len(files)} files to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
