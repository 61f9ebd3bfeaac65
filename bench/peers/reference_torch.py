#!/usr/bin/python3
"""Float64 logits of a Llama / Qwen2 folder's first positions, written from the Hugging Face
definitions in plain torch (Debian's python3-torch): the referee of the logits check.

    reference_torch.py FOLDER IDS_FILE --positions K --out FILE

Reads the first K ids of IDS_FILE (one line), runs them causally through the folder's weights
in float64 (one layer's weights at a time, read from the safetensors) and writes the K x vocab
logits as float32 to FILE. Implements RMSNorm, rotate-half RoPE (with Llama 3's rope_scaling
when the config has it), grouped-query attention, the SwiGLU MLP and the (tied) head.
"""
import argparse
import json
import math
import os

import numpy as np
import torch

from write_gguf import Folder, as_f32


def weight(folder, name):
    x, stored = folder.rows(name)
    return torch.from_numpy(as_f32(x, stored).astype(np.float64))


def inverse_frequencies(config, head_dim):
    theta = config.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    s = config.get("rope_scaling") or {}
    if (s.get("rope_type") or s.get("type")) == "llama3":
        factor = s["factor"]
        low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
        old = s.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(folder, ids):
    c = folder.config
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", heads)
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    eps = c.get("rms_norm_eps", 1e-6)
    n = len(ids)
    x = weight(folder, "model.embed_tokens.weight")[torch.tensor(ids)]
    angles = torch.outer(torch.arange(n, dtype=torch.float64), inverse_frequencies(c, head_dim))
    cos = torch.cat((angles, angles), -1).cos()
    sin = torch.cat((angles, angles), -1).sin()
    causal = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)

    def linear(h, name):
        y = h @ weight(folder, name + ".weight").T
        if name + ".bias" in folder.tensors:
            y = y + weight(folder, name + ".bias")
        return y

    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, weight(folder, p + "input_layernorm.weight"), eps)
        q = linear(h, p + "self_attn.q_proj").view(n, heads, head_dim).transpose(0, 1)
        k = linear(h, p + "self_attn.k_proj").view(n, kv_heads, head_dim).transpose(0, 1)
        v = linear(h, p + "self_attn.v_proj").view(n, kv_heads, head_dim).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, 0)
        v = v.repeat_interleave(heads // kv_heads, 0)
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim) + causal
        attn = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, heads * head_dim)
        x = x + linear(attn, p + "self_attn.o_proj")
        h = rms_norm(x, weight(folder, p + "post_attention_layernorm.weight"), eps)
        gate = linear(h, p + "mlp.gate_proj")
        x = x + linear(torch.nn.functional.silu(gate) * linear(h, p + "mlp.up_proj"),
                       p + "mlp.down_proj")
    x = rms_norm(x, weight(folder, "model.norm.weight"), eps)
    head = "lm_head.weight" if "lm_head.weight" in folder.tensors else "model.embed_tokens.weight"
    return x @ weight(folder, head).T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("ids")
    ap.add_argument("--positions", type=int, default=8)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    with open(a.ids) as f:
        ids = [int(t) for t in f.read().split()][:a.positions]
    with torch.no_grad():
        logits = forward(Folder(a.folder), ids)
    logits.numpy().astype(np.float32).tofile(a.out)
    print(json.dumps({"positions": len(ids), "vocab": logits.shape[1]}))


if __name__ == "__main__":
    main()
