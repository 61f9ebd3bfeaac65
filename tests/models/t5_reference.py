#!/usr/bin/env python3
"""Random-weight T5 folders (Hugging Face layout) and their float64 references.

Usage: t5_reference.py OUT_DIR

Writes OUT_DIR/t5-v1_0 (ReLU MLP, tied head, 8 buckets over a distance of 10, more decoder than
encoder layers) and OUT_DIR/t5-v1_1 (gated-GELU MLP, separate lm_head, the default 32 buckets
over 128, d_kv not d_model / num_heads), each with config.json and model.safetensors, and
OUT_DIR/reference.json. The network is a plain-torch float64 transcription of Hugging Face's
modeling_t5.py (T5ForConditionalGeneration): T5LayerNorm (x * rsqrt(mean(x^2) + eps) * w, no
mean, no bias) before every sub-layer, unscaled q.k attention plus the relative-position bias
that layer 0 of each stack computes (T5Attention._relative_position_bucket: bidirectional in the
encoder, causal in the decoder; logarithmic buckets in float32 as torch computes them) and
every layer of that stack adds, cross-attention without a bias, T5DenseActDense (wo(act(wi x)))
or T5DenseGatedActDense (wo(act(wi_0 x) * wi_1 x)) with gated-gelu meaning the tanh GELU, final
norms, and the tied head's d_model^-0.5 rescale. python3-torch only; deterministic (fixed seeds).
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

BASE = {
    "model_type": "t5",
    "architectures": ["T5ForConditionalGeneration"],
    "vocab_size": 64,
    "d_model": 32,
    "num_heads": 4,
    "layer_norm_epsilon": 1e-6,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "is_encoder_decoder": True,
    "torch_dtype": "float32",
}
VARIANTS = {
    "t5-v1_0": {"d_kv": 8, "d_ff": 48, "num_layers": 2, "num_decoder_layers": 3,
                "feed_forward_proj": "relu", "tie_word_embeddings": True,
                "relative_attention_num_buckets": 8, "relative_attention_max_distance": 10},
    "t5-v1_1": {"d_kv": 6, "d_ff": 40, "num_layers": 2, "feed_forward_proj": "gated-gelu",
                "tie_word_embeddings": False, "relative_attention_num_buckets": 32,
                "relative_attention_max_distance": 128},
}
SOURCE_LENGTHS = (1, 3, 6, 13)  # the last one reaches the logarithmic buckets
TARGET_LENGTHS = (2, 5, 0, 11)
MAX_NEW_TOKENS = 8
BEAM = 3


def decoder_layers(config):
    return config.get("num_decoder_layers", config["num_layers"])


def make_weights(config, seed):
    g = torch.Generator().manual_seed(seed)
    d, v, h, kv, ff = (config[k] for k in ("d_model", "vocab_size", "num_heads", "d_kv", "d_ff"))
    inner = h * kv
    gated = config["feed_forward_proj"].startswith("gated")

    def rand(*shape, std=0.3):
        # float32 values: the folder stores F32, the reference computes on them in float64.
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()

    w = {"shared.weight": rand(v, d, std=1.0)}
    for stack, layers in (("encoder", config["num_layers"]), ("decoder", decoder_layers(config))):
        w[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = rand(
            config["relative_attention_num_buckets"], h, std=1.0)
        for i in range(layers):
            p = f"{stack}.block.{i}.layer."
            attentions = ["0.SelfAttention"] + (["1.EncDecAttention"] if stack == "decoder" else [])
            for a in attentions:
                for n in "qkv":
                    w[p + f"{a}.{n}.weight"] = rand(inner, d)
                w[p + f"{a}.o.weight"] = rand(d, inner)
                w[p + f"{a[0]}.layer_norm.weight"] = 1 + rand(d, std=0.1)
            f = p + ("2" if stack == "decoder" else "1")
            if gated:
                w[f + ".DenseReluDense.wi_0.weight"] = rand(ff, d)
                w[f + ".DenseReluDense.wi_1.weight"] = rand(ff, d)
            else:
                w[f + ".DenseReluDense.wi.weight"] = rand(ff, d)
            w[f + ".DenseReluDense.wo.weight"] = rand(d, ff)
            w[f + ".layer_norm.weight"] = 1 + rand(d, std=0.1)
        w[f"{stack}.final_layer_norm.weight"] = 1 + rand(d, std=0.1)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(v, d)
    # A short output row keeps </s> out of the best candidates, so that the beam reference needs
    # no finished-hypothesis rules (beam() asserts it).
    w["shared.weight" if config["tie_word_embeddings"] else "lm_head.weight"][config["eos_token_id"]] *= 0.05
    return w




def layer_norm(x, weight, eps):
    """T5LayerNorm: root mean square only, no mean subtraction, no bias."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def relative_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5Attention._relative_position_bucket."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    # .float() is float32 whatever the default dtype: the bucket edges are torch's.
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, if_large)


def position_bias(config, table, q_len, k_len, bidirectional):
    """T5Attention.compute_bias: [heads, q_len, k_len]."""
    context = torch.arange(q_len, dtype=torch.long)[:, None]
    memory = torch.arange(k_len, dtype=torch.long)[None, :]
    buckets = relative_bucket(memory - context, bidirectional,
                              config["relative_attention_num_buckets"],
                              config["relative_attention_max_distance"])
    return table[buckets].permute(2, 0, 1)


def attention(config, w, p, x, memory, bias, allowed):
    """T5Attention without scaling: softmax(q k^T + bias) v over the allowed keys."""
    h, kv = config["num_heads"], config["d_kv"]
    q = (x @ w[p + ".q.weight"].T).view(-1, h, kv).transpose(0, 1)
    k = (memory @ w[p + ".k.weight"].T).view(-1, h, kv).transpose(0, 1)
    v = (memory @ w[p + ".v.weight"].T).view(-1, h, kv).transpose(0, 1)
    scores = q @ k.transpose(1, 2) + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(0, 1).reshape(x.shape[0], h * kv) @ w[p + ".o.weight"].T


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def feed_forward(config, w, p, x):
    """T5DenseActDense or T5DenseGatedActDense; T5Config maps gated-gelu to gelu_new."""
    proj = config["feed_forward_proj"]
    act = {"relu": torch.relu, "gated-gelu": gelu_new}[proj]
    if proj.startswith("gated"):
        return (act(x @ w[p + ".wi_0.weight"].T) * (x @ w[p + ".wi_1.weight"].T)) @ w[p + ".wo.weight"].T
    return act(x @ w[p + ".wi.weight"].T) @ w[p + ".wo.weight"].T


def encode(config, w, source):
    eps, T = config["layer_norm_epsilon"], len(source)
    x = w["shared.weight"][torch.tensor(source)]
    bias = position_bias(config, w["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                         T, T, True)
    everything = torch.ones(T, T, dtype=torch.bool)
    for i in range(config["num_layers"]):
        p = f"encoder.block.{i}.layer."
        h = layer_norm(x, w[p + "0.layer_norm.weight"], eps)
        x = x + attention(config, w, p + "0.SelfAttention", h, h, bias, everything)
        x = x + feed_forward(config, w, p + "1.DenseReluDense", layer_norm(x, w[p + "1.layer_norm.weight"], eps))
    return layer_norm(x, w["encoder.final_layer_norm.weight"], eps)


def decode(config, w, memory, decoder_input):
    """Logits [len(decoder_input), vocab], teacher-forced."""
    eps, T, S = config["layer_norm_epsilon"], len(decoder_input), memory.shape[0]
    y = w["shared.weight"][torch.tensor(decoder_input)]
    bias = position_bias(config, w["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                         T, T, False)
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    everything = torch.ones(T, S, dtype=torch.bool)
    for i in range(decoder_layers(config)):
        p = f"decoder.block.{i}.layer."
        h = layer_norm(y, w[p + "0.layer_norm.weight"], eps)
        y = y + attention(config, w, p + "0.SelfAttention", h, h, bias, causal)
        h = layer_norm(y, w[p + "1.layer_norm.weight"], eps)
        y = y + attention(config, w, p + "1.EncDecAttention", h, memory, 0.0, everything)
        y = y + feed_forward(config, w, p + "2.DenseReluDense", layer_norm(y, w[p + "2.layer_norm.weight"], eps))
    y = layer_norm(y, w["decoder.final_layer_norm.weight"], eps)
    if config["tie_word_embeddings"]:
        return (y * config["d_model"] ** -0.5) @ w["shared.weight"].T
    return y @ w["lm_head.weight"].T


def greedy(config, w, memory):
    """Argmax from decoder_start_token_id until eos (not output) or MAX_NEW_TOKENS tokens; also
    the smallest margin between the best and the second best logit."""
    ids, gap = [config["decoder_start_token_id"]], float("inf")
    for _ in range(MAX_NEW_TOKENS):
        top = decode(config, w, memory, ids)[-1].topk(2)
        gap = min(gap, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        if nxt == config["eos_token_id"]:
            break
        ids.append(nxt)
    return ids[1:], gap


def beam(config, w, memory):
    """Beam search over MAX_NEW_TOKENS steps keeping the BEAM best by total log probability. The
    end token must never be among any step's 2 * BEAM best candidates (asserted), so finished
    hypotheses and length penalties cannot change the result. Returns the best and its margin."""
    beams = [(0.0, [config["decoder_start_token_id"]])]
    for _ in range(MAX_NEW_TOKENS):
        candidates = []
        for score, ids in beams:
            logp = torch.log_softmax(decode(config, w, memory, ids)[-1], dim=-1)
            candidates += [(score + float(logp[t]), ids + [t]) for t in range(config["vocab_size"])]
        candidates.sort(key=lambda c: -c[0])
        assert all(c[1][-1] != config["eos_token_id"] for c in candidates[:2 * BEAM]), "eos in beam"
        beams = candidates[:BEAM]
    return beams[0][1][1:], beams[0][0] - beams[1][0]


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    reference = {}
    for n, (name, variant) in enumerate(VARIANTS.items()):
        config = dict(BASE, **variant)
        w = make_weights(config, seed=4321 + n)
        folder = out / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        write_safetensors(folder / "model.safetensors", w)
        g = torch.Generator().manual_seed(77 + n)
        pairs = []
        for src_len, tgt_len in zip(SOURCE_LENGTHS, TARGET_LENGTHS):
            # Sources end with </s> as T5's tokenizer writes them.
            source = torch.randint(2, config["vocab_size"], (src_len - 1,), generator=g).tolist() + [1]
            target = torch.randint(2, config["vocab_size"], (tgt_len,), generator=g).tolist()
            memory = encode(config, w, source)
            decoder_input = [config["decoder_start_token_id"]] + target
            greedy_ids, greedy_gap = greedy(config, w, memory)
            beam_ids, beam_gap = beam(config, w, memory)
            pairs.append({"source": source, "decoder_input": decoder_input,
                          "logits": decode(config, w, memory, decoder_input).tolist(),
                          "greedy_ids": greedy_ids, "greedy_gap": greedy_gap,
                          "beam_ids": beam_ids, "beam_gap": beam_gap})
        reference[name] = {"plugin": "t5", "pairs": pairs, "max_new_tokens": MAX_NEW_TOKENS,
                           "beam_size": BEAM, "eos": config["eos_token_id"]}
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
