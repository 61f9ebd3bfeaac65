#!/usr/bin/env python3
"""Random-weight MarianMT folders (Hugging Face layout) and their float64 references.

Usage: marian_reference.py OUT_DIR

Writes OUT_DIR/marian-shared (one token table for the encoder, the decoder and the tied head,
scale_embedding, swish, a final_logits_bias) and OUT_DIR/marian-separate (separate encoder and
decoder tables of different sizes, a separate lm_head, no final_logits_bias in the checkpoint,
unscaled embeddings, exact GELU, different encoder and decoder head counts and widths), each
with config.json and model.safetensors, and OUT_DIR/reference.json. The network is a plain-torch
float64 transcription of Hugging Face's modeling_marian.py (MarianMTModel): token embeddings
times sqrt(d_model) when scale_embedding, plus MarianSinusoidalPositionalEmbedding (position
t, column j < d/2: sin(t / 10000^(2j/d)), column d/2 + j: cos of the same angle), post-norm
encoder and decoder layers (x = LayerNorm(x + sublayer(x)) after self-attention,
cross-attention and fc2(act(fc1 x))), attention with biases and q scaled by head_dim^-0.5, no
final layer norm, and lm_head(x) + final_logits_bias. python3-torch only; deterministic (fixed
seeds).
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
    "model_type": "marian",
    "architectures": ["MarianMTModel"],
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "max_position_embeddings": 64,
    "eos_token_id": 0,
    "is_encoder_decoder": True,
    "normalize_before": False,
    "torch_dtype": "float32",
}
VARIANTS = {
    "marian-shared": {"vocab_size": 80, "decoder_vocab_size": 80, "pad_token_id": 79,
                      "decoder_start_token_id": 79, "encoder_attention_heads": 4,
                      "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48,
                      "activation_function": "swish", "scale_embedding": True,
                      "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True},
    "marian-separate": {"vocab_size": 80, "decoder_vocab_size": 72, "pad_token_id": 71,
                        "decoder_start_token_id": 71, "encoder_attention_heads": 4,
                        "decoder_attention_heads": 2, "encoder_ffn_dim": 48,
                        "decoder_ffn_dim": 40, "decoder_layers": 3, "activation_function": "gelu",
                        "scale_embedding": False, "share_encoder_decoder_embeddings": False,
                        "tie_word_embeddings": False},
}
SOURCE_LENGTHS = (1, 3, 6, 13)
TARGET_LENGTHS = (2, 5, 0, 11)
MAX_NEW_TOKENS = 8
BEAM = 3
EPS = 1e-5  # nn.LayerNorm's default


def target_vocab(config):
    return config["vocab_size"] if config["share_encoder_decoder_embeddings"] else config["decoder_vocab_size"]


def tables(config):
    """The names of the encoder table, the decoder table and the head (tied ones saved once)."""
    if config["share_encoder_decoder_embeddings"]:
        enc = dec = "model.shared.weight"
    else:
        enc, dec = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"
    return enc, dec, dec if config["tie_word_embeddings"] else "lm_head.weight"


def make_weights(config, seed):
    g = torch.Generator().manual_seed(seed)
    d = config["d_model"]

    def rand(*shape, std=0.3):
        # float32 values: the folder stores F32, the reference computes on them in float64.
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()

    enc, dec, head = tables(config)
    w = {enc: rand(config["vocab_size"], d, std=0.5), dec: rand(target_vocab(config), d, std=0.5)}
    if head not in w:
        w[head] = rand(target_vocab(config), d)
    if config["share_encoder_decoder_embeddings"]:
        w["final_logits_bias"] = rand(1, target_vocab(config), std=0.5)
    for stack in ("encoder", "decoder"):
        ffn = config[f"{stack}_ffn_dim"]
        for i in range(config[f"{stack}_layers"]):
            p = f"model.{stack}.layers.{i}."
            for a in ["self_attn"] + (["encoder_attn"] if stack == "decoder" else []):
                for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    w[p + f"{a}.{n}.weight"] = rand(d, d)
                    w[p + f"{a}.{n}.bias"] = rand(d, std=0.1)
                w[p + f"{a}_layer_norm.weight"] = 1 + rand(d, std=0.1)
                w[p + f"{a}_layer_norm.bias"] = rand(d, std=0.1)
            w[p + "fc1.weight"], w[p + "fc1.bias"] = rand(ffn, d), rand(ffn, std=0.1)
            w[p + "fc2.weight"], w[p + "fc2.bias"] = rand(d, ffn), rand(d, std=0.1)
            w[p + "final_layer_norm.weight"] = 1 + rand(d, std=0.1)
            w[p + "final_layer_norm.bias"] = rand(d, std=0.1)
    # A short output row and a low bias keep </s> out of the best candidates, so that the beam
    # reference needs no finished-hypothesis rules (beam() asserts it).
    w[head][config["eos_token_id"]] *= 0.05
    if "final_logits_bias" in w:
        w["final_logits_bias"][0, config["eos_token_id"]] = -2.0
    return w




def sinusoids(n_pos, dim):
    """MarianSinusoidalPositionalEmbedding._init_weight (even dim), in float64."""
    j = torch.arange(dim)
    position_enc = torch.arange(n_pos)[:, None] / torch.pow(10000.0, 2 * (j // 2) / dim)[None, :]
    out = torch.empty(n_pos, dim)
    out[:, : dim // 2] = torch.sin(position_enc[:, 0::2])
    out[:, dim // 2:] = torch.cos(position_enc[:, 1::2])
    return out


def layer_norm(x, w, name):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], EPS)


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def attention(w, p, heads, x, memory, allowed):
    """MarianAttention: q scaled by head_dim^-0.5, biases on every projection."""
    d = x.shape[-1]
    hd = d // heads
    q = (linear(x, w, p + ".q_proj") * hd ** -0.5).view(-1, heads, hd).transpose(0, 1)
    k = linear(memory, w, p + ".k_proj").view(-1, heads, hd).transpose(0, 1)
    v = linear(memory, w, p + ".v_proj").view(-1, heads, hd).transpose(0, 1)
    scores = (q @ k.transpose(1, 2)).masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return linear(out.transpose(0, 1).reshape(x.shape[0], d), w, p + ".out_proj")


def activation(config, x):
    return {"swish": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[config["activation_function"]](x)


def embed(config, w, table, ids):
    scale = math.sqrt(config["d_model"]) if config["scale_embedding"] else 1.0
    return w[table][torch.tensor(ids)] * scale + sinusoids(len(ids), config["d_model"])


def encode(config, w, source):
    x = embed(config, w, tables(config)[0], source)
    everything = torch.ones(len(source), len(source), dtype=torch.bool)
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        x = layer_norm(x + attention(w, p + "self_attn", config["encoder_attention_heads"], x, x, everything),
                       w, p + "self_attn_layer_norm")
        x = layer_norm(x + linear(activation(config, linear(x, w, p + "fc1")), w, p + "fc2"), w,
                       p + "final_layer_norm")
    return x


def decode(config, w, memory, decoder_input):
    """Logits [len(decoder_input), target vocab], teacher-forced."""
    T, heads = len(decoder_input), config["decoder_attention_heads"]
    _, dec, head = tables(config)
    y = embed(config, w, dec, decoder_input)
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    everything = torch.ones(T, memory.shape[0], dtype=torch.bool)
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        y = layer_norm(y + attention(w, p + "self_attn", heads, y, y, causal), w, p + "self_attn_layer_norm")
        y = layer_norm(y + attention(w, p + "encoder_attn", heads, y, memory, everything), w,
                       p + "encoder_attn_layer_norm")
        y = layer_norm(y + linear(activation(config, linear(y, w, p + "fc1")), w, p + "fc2"), w,
                       p + "final_layer_norm")
    logits = y @ w[head].T
    return logits + w["final_logits_bias"] if "final_logits_bias" in w else logits


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
            candidates += [(score + float(logp[t]), ids + [t]) for t in range(target_vocab(config))]
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
        w = make_weights(config, seed=2468 + n)
        folder = out / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        write_safetensors(folder / "model.safetensors", w)
        g = torch.Generator().manual_seed(55 + n)
        pairs = []
        for src_len, tgt_len in zip(SOURCE_LENGTHS, TARGET_LENGTHS):
            # Sources end with </s> as Marian's tokenizer writes them.
            source = torch.randint(1, config["pad_token_id"], (src_len - 1,), generator=g).tolist() + [0]
            target = torch.randint(1, config["pad_token_id"], (tgt_len,), generator=g).tolist()
            memory = encode(config, w, source)
            decoder_input = [config["decoder_start_token_id"]] + target
            greedy_ids, greedy_gap = greedy(config, w, memory)
            beam_ids, beam_gap = beam(config, w, memory)
            pairs.append({"source": source, "decoder_input": decoder_input,
                          "logits": decode(config, w, memory, decoder_input).tolist(),
                          "greedy_ids": greedy_ids, "greedy_gap": greedy_gap,
                          "beam_ids": beam_ids, "beam_gap": beam_gap})
        reference[name] = {"plugin": "marian", "pairs": pairs, "max_new_tokens": MAX_NEW_TOKENS,
                           "beam_size": BEAM, "eos": config["eos_token_id"]}
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
