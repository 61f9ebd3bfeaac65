#!/usr/bin/python3
"""Write a Hugging Face style model folder with random seeded weights for a real config.json.

    make_folder.py CONFIG OUT [--seed S] [--dtype bf16|f32] [--shard-bytes N]

OUT gets config.json (CONFIG's contents), generation_config.json and the weights under the
Hugging Face tensor names and shapes of a Llama or Qwen2 checkpoint, as sharded safetensors
(model-0000K-of-0000N.safetensors and model.safetensors.index.json) written here directly in
the safetensors format (an 8-byte little-endian header length, a JSON header, the raw data).

Initialised like the real models before training: matrices (and Qwen2's q/k/v biases, which
its checkpoints do have) normal with std = initializer_range, norms one. Every tensor's
values depend only on the seed and the tensor's name, so the output is deterministic; tensors
are generated and written in chunks, so memory stays small whatever the model's size (the
Llama-3.1-8B shape is 16 GB in bf16).
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

CHUNK_ELEMENTS = 1 << 24  # values generated per step (64 MB of float32)
DTYPES = {"bf16": ("BF16", 2), "f32": ("F32", 4)}


def tensor_plan(config):
    """[(name, shape, init)] in the order a checkpoint stores them; init is 'normal', 'one'."""
    arch = config["model_type"]
    if arch not in ("llama", "qwen2"):
        sys.exit(f"make_folder: model_type {arch!r} is not llama or qwen2")
    c = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or c // heads
    inner = config["intermediate_size"]
    vocab = config["vocab_size"]
    qkv_bias = arch == "qwen2" or config.get("attention_bias", False)
    o_bias = arch == "llama" and config.get("attention_bias", False)
    mlp_bias = config.get("mlp_bias", False)
    plan = [("model.embed_tokens.weight", (vocab, c), "normal")]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        for proj, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim),
                           ("v", kv_heads * head_dim)):
            plan.append((f"{p}self_attn.{proj}_proj.weight", (rows, c), "normal"))
            if qkv_bias:
                plan.append((f"{p}self_attn.{proj}_proj.bias", (rows,), "normal"))
        plan.append((f"{p}self_attn.o_proj.weight", (c, heads * head_dim), "normal"))
        if o_bias:
            plan.append((f"{p}self_attn.o_proj.bias", (c,), "normal"))
        for proj, shape in (("gate", (inner, c)), ("up", (inner, c)), ("down", (c, inner))):
            plan.append((f"{p}mlp.{proj}_proj.weight", shape, "normal"))
            if mlp_bias:
                plan.append((f"{p}mlp.{proj}_proj.bias", (shape[0],), "normal"))
        plan.append((f"{p}input_layernorm.weight", (c,), "one"))
        plan.append((f"{p}post_attention_layernorm.weight", (c,), "one"))
    plan.append(("model.norm.weight", (c,), "one"))
    if not config.get("tie_word_embeddings", False):
        plan.append(("lm_head.weight", (vocab, c), "normal"))
    return plan


def elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def shards(plan, itemsize, shard_bytes):
    """Tensors grouped into shards of at most shard_bytes (a larger tensor gets its own)."""
    out, current, size = [], [], 0
    for t in plan:
        nbytes = elements(t[1]) * itemsize
        if current and size + nbytes > shard_bytes:
            out.append(current)
            current, size = [], 0
        current.append(t)
        size += nbytes
    if current:
        out.append(current)
    return out


def to_bf16(x):
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even (no NaNs here)."""
    bits = x.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def chunks(name, shape, init, std, seed):
    """The tensor's float32 values, in row-major chunks of at most CHUNK_ELEMENTS."""
    n = elements(shape)
    if init == "one":
        yield np.ones(n, dtype=np.float32)
        return
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    for start in range(0, n, CHUNK_ELEMENTS):
        x = rng.standard_normal(min(CHUNK_ELEMENTS, n - start), dtype=np.float32)
        x *= np.float32(std)
        yield x


def write_shard(path, tensors, dtype, std, seed):
    tag, itemsize = DTYPES[dtype]
    header, offset = {}, 0
    for name, shape, _ in tensors:
        nbytes = elements(shape) * itemsize
        header[name] = {"dtype": tag, "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name, shape, init in tensors:
            for x in chunks(name, shape, init, std, seed):
                f.write((to_bf16(x) if dtype == "bf16" else x).tobytes())
    os.replace(tmp, path)
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="a Hugging Face config.json (llama or qwen2)")
    ap.add_argument("out", help="the folder to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--shard-bytes", type=int, default=2_000_000_000,
                    help="largest shard (default 2 GB, as Hugging Face's save_pretrained)")
    a = ap.parse_args()
    with open(a.config) as f:
        config = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    plan = tensor_plan(config)
    itemsize = DTYPES[a.dtype][1]
    groups = shards(plan, itemsize, a.shard_bytes)
    std = config.get("initializer_range", 0.02)
    weight_map, total = {}, 0
    for k, group in enumerate(groups, 1):
        name = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        print(f"make_folder: {os.path.join(a.out, name)} ({len(group)} tensors)", file=sys.stderr,
              flush=True)
        total += write_shard(os.path.join(a.out, name), group, a.dtype, std, a.seed)
        weight_map.update({t[0]: name for t in group})
    index = {"metadata": {"total_size": total},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    config["torch_dtype"] = "bfloat16" if a.dtype == "bf16" else "float32"
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    generation = {"bos_token_id": config.get("bos_token_id"),
                  "eos_token_id": config.get("eos_token_id"), "do_sample": False,
                  "transformers_version": config.get("transformers_version", "")}
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "make_folder.json"), "w") as f:
        json.dump({"config": os.path.abspath(a.config), "seed": a.seed, "dtype": a.dtype,
                   "shard_bytes": a.shard_bytes, "bytes": total, "tensors": len(plan)}, f,
                  indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
