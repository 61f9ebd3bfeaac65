#!/usr/bin/python3
"""Writes a random-weight GPT-2 in Hugging Face layout (config.json + model.safetensors).

    make_model.py OUT_DIR [--layers 12 --hidden 768 --heads 12 --vocab 50257 --positions 1024]

Deterministic: the same arguments give the same bytes (numpy PCG64, fixed seed). The weights
follow GPT-2's initialisation (normal, std 0.02; LayerNorm gains near 1), so activations and
logits have realistic ranges; the head is tied to the token embedding, as in GPT-2. The
safetensors file is written here with numpy (JSON header + raw little-endian F32 data).
"""
import argparse
import json
import os
import struct

import numpy as np


def tensor_specs(layers, hidden, vocab, positions):
    """(name, shape, kind) in the order GPT2LMHeadModel.state_dict() lists them."""
    c, inner = hidden, 4 * hidden
    specs = [("transformer.wte.weight", (vocab, c), "normal"),
             ("transformer.wpe.weight", (positions, c), "normal_small")]
    for l in range(layers):
        p = f"transformer.h.{l}."
        specs += [(p + "ln_1.weight", (c,), "gain"), (p + "ln_1.bias", (c,), "bias"),
                  (p + "attn.c_attn.weight", (c, 3 * c), "normal"),
                  (p + "attn.c_attn.bias", (3 * c,), "bias"),
                  (p + "attn.c_proj.weight", (c, c), "normal_proj"),
                  (p + "attn.c_proj.bias", (c,), "bias"),
                  (p + "ln_2.weight", (c,), "gain"), (p + "ln_2.bias", (c,), "bias"),
                  (p + "mlp.c_fc.weight", (c, inner), "normal"),
                  (p + "mlp.c_fc.bias", (inner,), "bias"),
                  (p + "mlp.c_proj.weight", (inner, c), "normal_proj"),
                  (p + "mlp.c_proj.bias", (c,), "bias")]
    specs += [("transformer.ln_f.weight", (c,), "gain"), ("transformer.ln_f.bias", (c,), "bias")]
    return specs


def make_tensor(rng, shape, kind, layers):
    if kind == "gain":
        return (1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "bias":
        return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    # GPT-2 scales the residual projections by 1/sqrt(2 * layers).
    std = {"normal": 0.02, "normal_small": 0.01, "normal_proj": 0.02 / np.sqrt(2 * layers)}[kind]
    return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def write_safetensors(path, specs, rng, layers):
    header, offset = {}, 0
    for name, shape, _ in specs:
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, shape, kind in specs:
            f.write(make_tensor(rng, shape, kind, layers).astype("<f4").tobytes())
    os.replace(tmp, path)


def write_config(path, args):
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "n_layer": args.layers, "n_embd": args.hidden, "n_head": args.heads, "n_inner": None,
        "n_positions": args.positions, "n_ctx": args.positions, "vocab_size": args.vocab,
        "bos_token_id": args.vocab - 1, "eos_token_id": args.vocab - 1,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "tie_word_embeddings": True, "torch_dtype": "float32",
        "use_cache": True,
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    specs = tensor_specs(args.layers, args.hidden, args.vocab, args.positions)
    write_safetensors(os.path.join(args.out, "model.safetensors"), specs, rng, args.layers)
    write_config(os.path.join(args.out, "config.json"), args)


if __name__ == "__main__":
    main()
