#!/usr/bin/env python3
"""Float64 plain-torch references for the attention masque shows (return_attention, masque
attention). python3-torch only; deterministic (fixed seed).

  attention_reference.py fixture OUT_DIR
      writes OUT_DIR/unilm-bert: a small random BertForMaskedLM folder (config.json,
      model.safetensors, vocab.txt) for the UniLM route of the seq2seq task.
  attention_reference.py attend CASES.json OUT.json
      for each case {"model": "aren" | "unilm", "dir": folder, "source": [ids],
      "target": [ids], "layer": L, "heads": N (0 = all)}, the attention rows CTranslate2's
      return_attention defines: for output token t, the attention over the source tokens of the
      query that predicted it (the decoder's input token t: <s> then target[:t]), layer L,
      heads 0..N-1 averaged. aren (../shared/models/aren-transliteration, its README's
      forward pass): cross-attention; unilm (BERT, post-norm, under the UniLM seq2seq mask:
      `[CLS] source [SEP]` is segment 0 and sees itself, each target token sees the source and
      the targets up to itself; target tokens have token type 1): self-attention of the token
      that predicts target[t] ([SEP] for t = 0, then target[t - 1]) restricted to the source
      columns.
  attention_reference.py forward CASES.json OUT.json
      for each case {"dir": BERT folder, "ids": [...], "allowed": [[0/1]*n]*n, "layer": L}, the
      self-attention probabilities [heads][n][n] of layer L under that mask (masque attention).
"""
import json
import math
import struct
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)


def read_safetensors(path):
    data = Path(path).read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    base = 8 + size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        values = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=torch.float32)
        tensors[name] = values.reshape(info["shape"]).to(torch.float64)
    return tensors


def linear(w, prefix, x):
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def layer_norm(w, prefix, x, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w[prefix + ".weight"] + w[prefix + ".bias"]


def heads_of(x, heads):  # [n, h*d] -> [h, n, d]
    n, width = x.shape
    return x.reshape(n, heads, width // heads).transpose(0, 1)


def mha(w, prefix, q_in, kv_in, allowed, heads, names=("q_proj", "k_proj", "v_proj", "out_proj")):
    """Returns (output [n, width], probabilities [heads, n_q, n_k]); allowed: [n_q, n_k] bool."""
    q = heads_of(linear(w, prefix + "." + names[0], q_in), heads)
    k = heads_of(linear(w, prefix + "." + names[1], kv_in), heads)
    v = heads_of(linear(w, prefix + "." + names[2], kv_in), heads)
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, -1)
    probs = torch.nan_to_num(probs, nan=0.0)  # a query with no allowed key: zeros
    context = (probs @ v).transpose(0, 1).reshape(q_in.shape[0], -1)
    return linear(w, prefix + "." + names[3], context), probs


# ---- aren-transliteration (README: pre-norm Transformer, concat sin/cos from position 1) ----

def sinusoids(n, dim):
    half = dim // 2
    inc = math.log(10000.0) / (half - 1)
    inv = torch.exp(-inc * torch.arange(half, dtype=torch.float64))
    p = (torch.arange(n, dtype=torch.float64) + 1)[:, None] * inv[None, :]
    return torch.cat([torch.sin(p), torch.cos(p)], -1)


def aren_attention(folder, source, target, layer, heads_to_average):
    w = read_safetensors(Path(folder) / "model.safetensors")
    config = json.loads((Path(folder) / "config.json").read_text())
    d, heads, eps = config["d_model"], config["num_heads"], config["layer_norm_eps"]
    layers = config["num_decoder_layers"]
    layer = layer % layers
    s = len(source)
    x = w["encoder.embed_tokens.weight"][source] * math.sqrt(d) + sinusoids(s, d)
    everyone = torch.ones(s, s, dtype=torch.bool)
    for l in range(config["num_encoder_layers"]):
        p = f"encoder.layers.{l}"
        out, _ = mha(w, p + ".self_attn", layer_norm(w, p + ".self_attn_layer_norm", x, eps),
                     layer_norm(w, p + ".self_attn_layer_norm", x, eps), everyone, heads)
        x = x + out
        h = layer_norm(w, p + ".final_layer_norm", x, eps)
        x = x + linear(w, p + ".fc2", torch.relu(linear(w, p + ".fc1", h)))
    memory = layer_norm(w, "encoder.layer_norm", x, eps)
    inputs = [config["decoder_start_token_id"]] + list(target[:-1]) if target else []
    n = len(inputs)
    if n == 0:
        return []
    y = w["decoder.embed_tokens.weight"][inputs] * math.sqrt(d) + sinusoids(n, d)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    cross_allowed = torch.ones(n, s, dtype=torch.bool)
    kept = None
    for l in range(layers):
        p = f"decoder.layers.{l}"
        h = layer_norm(w, p + ".self_attn_layer_norm", y, eps)
        out, _ = mha(w, p + ".self_attn", h, h, causal, heads)
        y = y + out
        h = layer_norm(w, p + ".encoder_attn_layer_norm", y, eps)
        out, probs = mha(w, p + ".encoder_attn", h, memory, cross_allowed, heads)
        y = y + out
        if l == layer:
            kept = probs
        h = layer_norm(w, p + ".final_layer_norm", y, eps)
        y = y + linear(w, p + ".fc2", torch.relu(linear(w, p + ".fc1", h)))
    count = heads_to_average or heads
    return kept[:count].mean(0).tolist()


# ---- BERT (HF BertForMaskedLM encoder, post-norm, exact GELU) ----

BERT_NAMES = ("attention.self.query", "attention.self.key", "attention.self.value",
              "attention.output.dense")


def bert_probs(folder, ids, types, allowed, layer):
    """Self-attention probabilities [heads, n, n] of `layer` under `allowed` [n, n]."""
    w = read_safetensors(Path(folder) / "model.safetensors")
    config = json.loads((Path(folder) / "config.json").read_text())
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
    layers = config["num_hidden_layers"]
    layer = layer % layers
    n = len(ids)
    p = "bert."
    x = (w[p + "embeddings.word_embeddings.weight"][ids] +
         w[p + "embeddings.position_embeddings.weight"][torch.arange(n)] +
         w[p + "embeddings.token_type_embeddings.weight"][types])
    x = layer_norm(w, p + "embeddings.LayerNorm", x, eps)
    kept = None
    for l in range(layers):
        q = f"{p}encoder.layer.{l}."
        out, probs = mha(w, q[:-1], x, x, allowed, heads, BERT_NAMES)
        x = layer_norm(w, q + "attention.output.LayerNorm", x + out, eps)
        inner = torch.nn.functional.gelu(linear(w, q + "intermediate.dense", x))
        x = layer_norm(w, q + "output.LayerNorm", x + linear(w, q + "output.dense", inner), eps)
        if l == layer:
            kept = probs
    return kept


def unilm_attention(folder, source, target, layer, heads_to_average):
    if not target:
        return []
    s = len(source)
    fed = list(source) + list(target[:-1])
    n = len(fed)
    types = [0] * s + [1] * (n - s)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[:, :s] = True
    allowed[:s, s:] = False
    for i in range(s, n):
        allowed[i, s:i + 1] = True
    probs = bert_probs(folder, fed, types, allowed, layer)
    count = heads_to_average or probs.shape[0]
    rows = probs[:count].mean(0)
    return [rows[s - 1 + t, :s].tolist() for t in range(len(target))]


def write_fixture(out_dir):
    torch.manual_seed(24)
    folder = Path(out_dir) / "unilm-bert"
    folder.mkdir(parents=True, exist_ok=True)
    words = ["the", "cat", "dog", "sat", "on", "a", "mat", "ran", "to", "house", "big", "small",
             "red", "blue", "and", "it", "was", "##s", "##ed", "##ing"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    (folder / "vocab.txt").write_text("".join(v + "\n" for v in vocab))
    h, heads, inner, layers, positions = 16, 4, 32, 3, 64
    config = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": h,
              "num_attention_heads": heads, "intermediate_size": inner,
              "num_hidden_layers": layers, "max_position_embeddings": positions,
              "type_vocab_size": 2, "vocab_size": len(vocab), "hidden_act": "gelu",
              "layer_norm_eps": 1e-12, "pad_token_id": 0, "tie_word_embeddings": True}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # Weights large enough that attention is far from uniform.
    t = {}

    def rand(*shape, std=0.5):
        return torch.randn(*shape) * std

    p = "bert."
    t[p + "embeddings.word_embeddings.weight"] = rand(len(vocab), h, std=1.0)
    t[p + "embeddings.position_embeddings.weight"] = rand(positions, h)
    t[p + "embeddings.token_type_embeddings.weight"] = rand(2, h)
    for name in ["embeddings.LayerNorm"]:
        t[p + name + ".weight"] = 1 + rand(h, std=0.1)
        t[p + name + ".bias"] = rand(h, std=0.1)
    for l in range(layers):
        q = f"{p}encoder.layer.{l}."
        for name, (o, i) in {"attention.self.query": (h, h), "attention.self.key": (h, h),
                             "attention.self.value": (h, h), "attention.output.dense": (h, h),
                             "intermediate.dense": (inner, h),
                             "output.dense": (h, inner)}.items():
            t[q + name + ".weight"] = rand(o, i)
            t[q + name + ".bias"] = rand(o, std=0.1)
        for name in ["attention.output.LayerNorm", "output.LayerNorm"]:
            t[q + name + ".weight"] = 1 + rand(h, std=0.1)
            t[q + name + ".bias"] = rand(h, std=0.1)
    t["cls.predictions.transform.dense.weight"] = rand(h, h)
    t["cls.predictions.transform.dense.bias"] = rand(h, std=0.1)
    t["cls.predictions.transform.LayerNorm.weight"] = 1 + rand(h, std=0.1)
    t["cls.predictions.transform.LayerNorm.bias"] = rand(h, std=0.1)
    t["cls.predictions.bias"] = rand(len(vocab), std=0.1)
    write_safetensors(folder / "model.safetensors", t)


def main():
    mode = sys.argv[1]
    if mode == "fixture":
        write_fixture(sys.argv[2])
        return
    cases = json.loads(Path(sys.argv[2]).read_text())
    out = []
    for c in cases:
        if mode == "attend":
            fn = aren_attention if c["model"] == "aren" else unilm_attention
            out.append(fn(c["dir"], c["source"], c["target"], c["layer"], c["heads"]))
        elif mode == "forward":
            n = len(c["ids"])
            allowed = torch.tensor(c["allowed"], dtype=torch.bool)
            types = c.get("types", [0] * n)
            out.append(bert_probs(c["dir"], c["ids"], types, allowed, c["layer"]).tolist())
        else:
            raise SystemExit("unknown mode " + mode)
    Path(sys.argv[3]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
