#!/usr/bin/python3
"""Write a GGUF v3 file for llama.cpp from a Hugging Face Llama or Qwen2 folder.

    write_gguf.py FOLDER OUT.gguf --type F32|BF16|Q8_0|Q4_0

Follows the public GGUF specification (ggml's docs/gguf.md): the header, the metadata
key-value pairs, the tensor infos, then each tensor's data at a 32-byte aligned offset.
Weights are read from the folder's safetensors (bf16 or f32), matrices converted to --type and
one-dimensional tensors (norms, biases, RoPE factors) kept in F32, as llama.cpp's own converter
does. Like that converter, the `llama` architecture gets the rows of q_proj and k_proj
permuted from Hugging Face's rotate-half RoPE layout to the interleaved pairs llama.cpp's
`llama` graph rotates (`qwen2` runs llama.cpp's NeoX-style RoPE on the unpermuted weights),
and a Llama 3 `rope_scaling` becomes the `rope_freqs.weight` tensor of per-frequency factors.

Q8_0 and Q4_0 follow ggml's reference quantization (blocks of 32 values along a row, one f16
scale each): Q8_0 d = max|x| / 127, q = round(x / d); Q4_0 d = x_m / -8 for the x_m of largest
magnitude, q = min(15, trunc(x / d + 8.5)) packed two per byte (value j in the low nibble of
byte j, value j + 16 in its high nibble).

The tokenizer metadata is synthetic: a `gpt2`-type vocabulary of vocab_size tokens (the 256
byte-level symbols, then placeholders), no merges, the config's bos/eos ids as control tokens.
llama.cpp loads it and evaluates token ids fed to it directly; it is not a real tokenizer.
Tensors are converted and written one block of rows at a time, so memory stays small.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

ALIGNMENT = 32
ROWS_ELEMENTS = 1 << 23  # values converted per step

# ggml_type ids and general.file_type values of the GGUF specification
GGML_TYPES = {"F32": 0, "BF16": 30, "Q8_0": 8, "Q4_0": 2}
FILE_TYPES = {"F32": 0, "BF16": 32, "Q8_0": 7, "Q4_0": 2}
BLOCK = 32

# gguf_metadata_value_type
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)


# ---- reading the folder ----------------------------------------------------------------------

class Folder:
    """A Hugging Face folder's config and its safetensors, tensor by tensor (memory-mapped)."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            self.config = json.load(f)
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.tensors = {}
        for name in files:
            file = os.path.join(path, name)
            with open(file, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
            for key, info in header.items():
                if key != "__metadata__":
                    self.tensors[key] = (file, 8 + n, info)

    def rows(self, name):
        """The tensor as a memory-mapped array of its stored type (uint16 for BF16) and shape."""
        file, base, info = self.tensors[name]
        dtype = {"BF16": np.uint16, "F32": np.float32}.get(info["dtype"])
        if dtype is None:
            sys.exit(f"write_gguf: {name} is {info['dtype']}; only BF16 and F32 are read")
        begin = info["data_offsets"][0]
        shape = tuple(info["shape"])
        return np.memmap(file, dtype=dtype, mode="r", offset=base + begin, shape=shape), \
            info["dtype"]


def as_f32(x, stored):
    if stored == "F32":
        return np.asarray(x, dtype=np.float32)
    return (np.asarray(x, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def as_bf16(x, stored):
    """bfloat16 bit patterns: the stored ones, or float32 rounded to nearest even."""
    if stored == "BF16":
        return np.asarray(x, dtype=np.uint16)
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
            >> np.uint32(16)).astype(np.uint16)


# ---- quantization (ggml's reference definitions) -------------------------------------------

def quantize_q8_0(x):
    """float32 rows (length a multiple of 32) -> Q8_0 blocks: f16 d, then 32 int8."""
    b = x.reshape(-1, BLOCK)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = (b * inv[:, None]).astype(np.float64)
    q = np.trunc(v + np.copysign(0.5, v)).astype(np.int8)  # C roundf: half away from zero
    out = np.empty((b.shape[0], 2 + BLOCK), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def quantize_q4_0(x):
    """float32 rows -> Q4_0 blocks: f16 d, then 16 bytes of two 4-bit values each."""
    b = x.reshape(-1, BLOCK)
    pick = np.abs(b).argmax(axis=1)  # the first value of largest magnitude
    signed_max = b[np.arange(b.shape[0]), pick]
    d = (signed_max / np.float32(-8)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = b * inv[:, None] + np.float32(8.5)
    q = np.minimum(15, np.trunc(v)).astype(np.uint8)
    out = np.empty((b.shape[0], 2 + BLOCK // 2), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :BLOCK // 2] | (q[:, BLOCK // 2:] << np.uint8(4))
    return out.tobytes()


def encode(x, stored, ggml_type):
    """A block of rows in the stored type -> the bytes of ggml_type."""
    if ggml_type == "F32":
        return as_f32(x, stored).tobytes()
    if ggml_type == "BF16":
        return as_bf16(x, stored).tobytes()
    f = as_f32(x, stored)
    return quantize_q8_0(f) if ggml_type == "Q8_0" else quantize_q4_0(f)


def nbytes(shape, ggml_type):
    n = math.prod(shape)
    if ggml_type == "F32":
        return 4 * n
    if ggml_type == "BF16":
        return 2 * n
    if shape[-1] % BLOCK:
        sys.exit(f"write_gguf: rows of {shape[-1]} values are not whole blocks of {BLOCK}")
    return n // BLOCK * (2 + (BLOCK if ggml_type == "Q8_0" else BLOCK // 2))


# ---- the llama.cpp side of the names and layouts ---------------------------------------------

def permute_rows(w, heads):
    """Hugging Face's rotate-half q/k rows (per head: first halves, then second halves) to the
    interleaved pairs llama.cpp's `llama` RoPE rotates (llama.cpp's converter does the same)."""
    shape = w.shape
    return (w.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2)
            .reshape(shape))


def gguf_name(hf):
    parts = hf.split(".")
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    if parts[:2] == ["model", "layers"]:
        block, rest = parts[2], ".".join(parts[3:-1])
        names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
                 "post_attention_layernorm": "ffn_norm"}
        if rest in names:
            return f"blk.{block}.{names[rest]}.{parts[-1]}"
    sys.exit(f"write_gguf: no GGUF name for tensor {hf}")


def llama3_rope_factors(config):
    """The per-frequency divisors of Llama 3's rope_scaling (llama.cpp's rope_freqs.weight)."""
    s = config["rope_scaling"]
    base = config.get("rope_theta", 10000.0)
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    factor = s.get("factor", 8.0)
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old = s.get("original_max_position_embeddings", 8192)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def synthetic_vocab(config):
    """Token texts and types: GPT-2's 256 byte-level symbols, then placeholders."""
    vocab = config["vocab_size"]
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
                 + list(range(0xAE, 0x100)))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    tokens = [symbols[b] for b in range(256)] + [f"<|t{i}|>" for i in range(256, vocab)]
    types = [1] * vocab  # normal
    for key in ("bos_token_id", "eos_token_id"):
        ids = config.get(key)
        for i in ids if isinstance(ids, list) else [ids]:
            if i is not None and 256 <= i < vocab:
                tokens[i] = f"<|{key[:3]}_{i}|>"
                types[i] = 3  # control
    return tokens, types


def first_id(value):
    return value[0] if isinstance(value, list) else value


# ---- the file --------------------------------------------------------------------------------

def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, value):
    if kind == STRING:
        return gguf_string(value)
    if kind == ARRAY:
        item_kind, items = value
        body = b"".join(gguf_value(item_kind, v) for v in items)
        return struct.pack("<IQ", item_kind, len(items)) + body
    fmt = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32V: "f", BOOL: "?",
           U64: "Q", I64: "q", F64: "d"}[kind]
    return struct.pack("<" + fmt, value)


def metadata(config, ggml_type, name):
    arch = config["model_type"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    tokens, types = synthetic_vocab(config)
    kv = [
        ("general.architecture", STRING, arch),
        ("general.name", STRING, name),
        ("general.file_type", U32, FILE_TYPES[ggml_type]),
        ("general.alignment", U32, ALIGNMENT),
        (f"{arch}.vocab_size", U32, config["vocab_size"]),
        (f"{arch}.context_length", U32, config["max_position_embeddings"]),
        (f"{arch}.embedding_length", U32, config["hidden_size"]),
        (f"{arch}.block_count", U32, config["num_hidden_layers"]),
        (f"{arch}.feed_forward_length", U32, config["intermediate_size"]),
        (f"{arch}.attention.head_count", U32, heads),
        (f"{arch}.attention.head_count_kv", U32, config.get("num_key_value_heads", heads)),
        (f"{arch}.attention.key_length", U32, head_dim),
        (f"{arch}.attention.value_length", U32, head_dim),
        (f"{arch}.rope.dimension_count", U32, head_dim),
        (f"{arch}.rope.freq_base", F32V, config.get("rope_theta", 10000.0)),
        (f"{arch}.attention.layer_norm_rms_epsilon", F32V, config.get("rms_norm_eps", 1e-6)),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "default"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, [])),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
    ]
    for key in ("bos_token_id", "eos_token_id"):
        if config.get(key) is not None:
            kv.append((f"tokenizer.ggml.{key}", U32, first_id(config[key])))
    if ggml_type in ("Q8_0", "Q4_0"):
        kv.append(("general.quantization_version", U32, 2))
    return kv


def tensor_list(folder, ggml_type):
    """[(gguf name, hf name or None, shape, ggml type)] in the file's order."""
    config = folder.config
    out = []
    rope = config.get("rope_scaling") or {}
    if (rope.get("rope_type") or rope.get("type")) == "llama3":
        dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        out.append(("rope_freqs.weight", None, (dim // 2,), "F32"))
    order = ["model.embed_tokens.weight"]
    layers = config["num_hidden_layers"]
    for layer in range(layers):
        order += sorted(k for k in folder.tensors if k.startswith(f"model.layers.{layer}."))
    order += ["model.norm.weight"]
    if "lm_head.weight" in folder.tensors:
        order.append("lm_head.weight")
    missing = [k for k in order if k not in folder.tensors]
    unused = set(folder.tensors) - set(order)
    if missing or unused:
        sys.exit(f"write_gguf: tensors missing {missing[:3]} or unexpected {sorted(unused)[:3]}")
    for hf in order:
        shape = tuple(folder.tensors[hf][2]["shape"])
        out.append((gguf_name(hf), hf, shape, ggml_type if len(shape) == 2 else "F32"))
    return out


def tensor_blocks(folder, hf, ggml_type, arch):
    """The bytes of one tensor in ggml_type, a block of rows at a time."""
    config = folder.config
    if hf is None:  # rope_freqs
        yield llama3_rope_factors(config).tobytes()
        return
    x, stored = folder.rows(hf)
    heads = None
    if arch == "llama" and ".self_attn.q_proj." in hf:
        heads = config["num_attention_heads"]
    elif arch == "llama" and ".self_attn.k_proj." in hf:
        heads = config.get("num_key_value_heads", config["num_attention_heads"])
    if heads is not None:  # q/k: at most a few tens of MB, permuted whole
        yield encode(permute_rows(np.asarray(x), heads), stored, ggml_type)
        return
    if x.ndim == 1:
        yield encode(x, stored, ggml_type)
        return
    step = max(1, ROWS_ELEMENTS // x.shape[1])
    for r in range(0, x.shape[0], step):
        yield encode(x[r:r + step], stored, ggml_type)


def write(folder, out, ggml_type):
    config = folder.config
    arch = config["model_type"]
    if arch not in ("llama", "qwen2"):
        sys.exit(f"write_gguf: model_type {arch!r} is not llama or qwen2")
    tensors = tensor_list(folder, ggml_type)
    kv = metadata(config, ggml_type, os.path.basename(os.path.normpath(folder.path)))
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, kind, value in kv:
        head += gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, value)
    offset, sizes = 0, []
    for name, _, shape, t in tensors:
        dims = tuple(reversed(shape))  # ggml's ne: the fastest-varying dimension first
        head += gguf_string(name) + struct.pack("<I", len(dims))
        head += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", GGML_TYPES[t], offset)
        size = nbytes(shape, t)
        sizes.append(size)
        offset += size + (-size % ALIGNMENT)
    head += b"\0" * (-len(head) % ALIGNMENT)
    tmp = out + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        for (name, hf, shape, t), size in zip(tensors, sizes):
            written = 0
            for chunk in tensor_blocks(folder, hf, t, arch):
                f.write(chunk)
                written += len(chunk)
            if written != size:
                sys.exit(f"write_gguf: {name}: wrote {written} bytes, expected {size}")
            f.write(b"\0" * (-size % ALIGNMENT))
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="a Hugging Face folder (config.json + safetensors)")
    ap.add_argument("out", help="the .gguf file to write")
    ap.add_argument("--type", required=True, choices=list(GGML_TYPES),
                    help="the type of the matrices (vectors stay F32)")
    a = ap.parse_args()
    folder = Folder(a.folder)
    write(folder, a.out, a.type)
    print(f"write_gguf: {a.out} ({os.path.getsize(a.out) / 1e9:.2f} GB, {a.type})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
