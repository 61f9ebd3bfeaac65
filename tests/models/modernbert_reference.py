#!/usr/bin/env python3
"""Random-weight ModernBERT folders (Hugging Face layout) and their float64 references.

Usage: modernbert_reference.py OUT_DIR

Writes OUT_DIR/NAME (config.json, model.safetensors) for every variant below and
OUT_DIR/reference.json. The network is a plain-torch float64 transcription of Hugging Face's
modeling_modernbert.py (the eager path): token embeddings and a LayerNorm (no bias unless
norm_bias), pre-norm encoder layers (layer 0 without attn_norm), a fused Wqkv, rotate_half RoPE
at global_rope_theta in the global layers (every global_attn_every_n_layers-th from 0) and
local_rope_theta in the others, which see only keys at distance <= local_attention // 2, a GeGLU
MLP (Wi = [input | gate], act(input) * gate), final_norm, and ModernBertForMaskedLM's head
(dense, activation, norm, then the decoder tied to the token table, with a bias).
python3-torch only; deterministic (fixed seeds).
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

BASE = {
    "model_type": "modernbert",
    "architectures": ["ModernBertForMaskedLM"],
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 40,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": 128,
    "norm_eps": 1e-5,
    "norm_bias": False,
    "attention_bias": False,
    "mlp_bias": False,
    "classifier_bias": False,
    "decoder_bias": True,
    "hidden_activation": "gelu",
    "classifier_activation": "gelu",
    "global_attn_every_n_layers": 3,
    "local_attention": 6,
    "global_rope_theta": 160000.0,
    "local_rope_theta": 100.0,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "cls_token_id": 1,
    "sep_token_id": 2,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}
VARIANTS = {
    "modernbert": {},
    # Biases everywhere and a bare ModernBertModel (no head tensors).
    "modernbert-biases": {"architectures": ["ModernBertModel"], "norm_bias": True,
                          "attention_bias": True, "mlp_bias": True, "global_attn_every_n_layers": 2,
                          "local_attention": 4},
}


def make_weights(config, seed, head=True):
    g = torch.Generator().manual_seed(seed)
    c, inner, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]

    def rand(*shape, std=0.3):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()

    w = {}

    def linear(name, out, inp, bias):
        w[name + ".weight"] = rand(out, inp)
        if bias:
            w[name + ".bias"] = rand(out, std=0.1)

    def norm(name):
        w[name + ".weight"] = 1 + rand(c, std=0.1)
        if config["norm_bias"]:
            w[name + ".bias"] = rand(c, std=0.1)

    w["model.embeddings.tok_embeddings.weight"] = rand(v, c, std=0.5)
    norm("model.embeddings.norm")
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if i > 0:
            norm(p + "attn_norm")
        linear(p + "attn.Wqkv", 3 * c, c, config["attention_bias"])
        linear(p + "attn.Wo", c, c, config["attention_bias"])
        norm(p + "mlp_norm")
        linear(p + "mlp.Wi", 2 * inner, c, config["mlp_bias"])
        linear(p + "mlp.Wo", c, inner, config["mlp_bias"])
    norm("model.final_norm")
    if head:
        linear("head.dense", c, c, config["classifier_bias"])
        norm("head.norm")
        w["decoder.bias"] = rand(v, std=0.1)
    return w


def layer_norm(x, w, name, config):
    bias = w.get(name + ".bias")
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w[name + ".weight"], bias,
                                          config["norm_eps"])


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def act(name):
    return {"gelu": torch.nn.functional.gelu,
            "gelu_pytorch_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}[name]


def forward(config, w, ids, with_head=True):
    """Logits [T, V] (or the final hidden states without a head) of one sequence."""
    c, heads = config["hidden_size"], config["num_attention_heads"]
    d, T = c // heads, len(ids)
    pos = torch.arange(T, dtype=torch.float64)
    rows = torch.arange(T)
    near = (rows.unsqueeze(0) - rows.unsqueeze(1)).abs() <= config["local_attention"] // 2

    def bias(name):
        return w.get(name + ".bias", 0)

    x = layer_norm(w["model.embeddings.tok_embeddings.weight"][torch.tensor(ids)], w,
                   "model.embeddings.norm", config)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        local = i % config["global_attn_every_n_layers"] != 0
        theta = config["local_rope_theta"] if local else config["global_rope_theta"]
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).double() / d))
        emb = torch.cat((torch.outer(pos, inv_freq),) * 2, dim=-1)
        cos, sin = emb.cos(), emb.sin()
        h = x if i == 0 else layer_norm(x, w, p + "attn_norm", config)
        qkv = (h @ w[p + "attn.Wqkv.weight"].T + bias(p + "attn.Wqkv")).view(T, 3, heads, d)
        q, k, v = (qkv[:, n].transpose(0, 1) for n in range(3))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = (q @ k.transpose(1, 2)) * d ** -0.5
        if local:
            scores = scores.masked_fill(~near, float("-inf"))
        attn = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(T, c)
        x = x + attn @ w[p + "attn.Wo.weight"].T + bias(p + "attn.Wo")
        h = layer_norm(x, w, p + "mlp_norm", config)
        inp, gate = (h @ w[p + "mlp.Wi.weight"].T + bias(p + "mlp.Wi")).chunk(2, dim=-1)
        x = x + (act(config["hidden_activation"])(inp) * gate) @ w[p + "mlp.Wo.weight"].T + \
            bias(p + "mlp.Wo")
    x = layer_norm(x, w, "model.final_norm", config)
    if not with_head:
        return x
    h = act(config["classifier_activation"])(x @ w["head.dense.weight"].T + bias("head.dense"))
    h = layer_norm(h, w, "head.norm", config)
    return h @ w["model.embeddings.tok_embeddings.weight"].T + w["decoder.bias"]


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    reference = {}
    for n, (name, variant) in enumerate(VARIANTS.items()):
        config = dict(BASE, **variant)
        head = config["architectures"][0] == "ModernBertForMaskedLM"
        w = make_weights(config, seed=2024 + n, head=head)
        folder = out / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        # A bare ModernBertModel saves its tensors without the "model." prefix.
        stored = w if head else {k.removeprefix("model."): t for k, t in w.items()}
        write_safetensors(folder / "model.safetensors", stored)
        g = torch.Generator().manual_seed(11 + n)
        sequences = []
        for length in (1, 3, 5, 8, 13):
            ids = [1] + torch.randint(3, 95, (length - 1,), generator=g).tolist()
            sequences.append({"ids": ids, "output": forward(config, w, ids, head).tolist()})
        reference[name] = {"sequences": sequences, "head": head}
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
