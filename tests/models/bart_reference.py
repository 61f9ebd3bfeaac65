#!/usr/bin/env python3
"""Random-weight BART, mBART and M2M-100 / NLLB folders (Hugging Face layout) and their float64
references.

Usage: bart_reference.py OUT_DIR

Writes one folder per variant (config.json, model.safetensors, a word-level tokenizer.json, for
nllb a generation_config.json) and OUT_DIR/reference.json:
  bart-tied     BartForConditionalGeneration: post-norm, learned positions at offset 2,
                layernorm_embedding, unscaled embeddings, gelu, a tied head plus
                final_logits_bias, forced_bos_token_id 0 (as facebook/bart-large's config).
  bart-untied   the same network with scale_embedding, relu, separate lm_head.weight, no
                final_logits_bias in the checkpoint, no forced token, other head counts.
  bart-model    bart-tied's weights as BartModel saves them (no model. prefix, no head).
  mbart         MBartForConditionalGeneration: pre-norm, final encoder/decoder layer_norm,
                layernorm_embedding, scale_embedding, tied head plus final_logits_bias,
                decoder_start eos then a forced language token.
  m2m_100       M2M100ForConditionalGeneration: pre-norm, final layer_norm, relu,
                scale_embedding, M2M100SinusoidalPositionalEmbedding, tied head, a forced
                language token in config.json.
  nllb          m2m_100 with NLLB-200's config keys, an untied head, and its tokens in
                generation_config.json (the forced language token there).
The networks are plain-torch float64 transcriptions of modeling_bart.py, modeling_mbart.py and
modeling_m2m_100.py: token embeddings times sqrt(d_model) when scale_embedding, positions
(learned: row t + 2; sinusoidal: fairseq's half_dim - 1 formula, [sin | cos], real tokens
numbered from padding_idx + 1, row padding_idx zero), layernorm_embedding, encoder and decoder
layers (post-norm: x = LN(x + f(x)); pre-norm: x = x + f(LN(x))) with attention whose q is scaled
by head_dim^-0.5, the final layer norms, lm_head(x) + final_logits_bias. Greedy and beam decoding
start from decoder_start_token_id, force forced_bos_token_id as the first generated token
(ForcedBOSTokenLogitsProcessor) and stop at eos. python3-torch only; deterministic (fixed seeds).
"""
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

COMMON = {
    "d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48,
    "max_position_embeddings": 64, "vocab_size": 90, "pad_token_id": 1, "bos_token_id": 0,
    "eos_token_id": 2, "decoder_start_token_id": 2, "is_encoder_decoder": True,
    "torch_dtype": "float32", "dropout": 0.1, "attention_dropout": 0.0, "init_std": 0.02,
}
VARIANTS = {
    "bart-tied": {"model_type": "bart", "architectures": ["BartForConditionalGeneration"],
                  "activation_function": "gelu", "scale_embedding": False,
                  "forced_bos_token_id": 0, "forced_eos_token_id": 2,
                  "tie_word_embeddings": True, "normalize_before": False},
    "bart-untied": {"model_type": "bart", "architectures": ["BartForConditionalGeneration"],
                    "activation_function": "relu", "scale_embedding": True,
                    "decoder_attention_heads": 2, "decoder_ffn_dim": 40, "decoder_layers": 3,
                    "tie_word_embeddings": False},
    "mbart": {"model_type": "mbart", "architectures": ["MBartForConditionalGeneration"],
              "activation_function": "gelu", "scale_embedding": True, "forced_bos_token_id": 87,
              "forced_eos_token_id": 2, "tie_word_embeddings": True},
    "m2m_100": {"model_type": "m2m_100", "architectures": ["M2M100ForConditionalGeneration"],
                "activation_function": "relu", "scale_embedding": True,
                "forced_bos_token_id": 86, "encoder_layers": 3, "tie_word_embeddings": True},
    # NLLB-200's config.json keys (facebook/nllb-200-distilled-600M), shrunk.
    "nllb": {"model_type": "m2m_100", "architectures": ["M2M100ForConditionalGeneration"],
             "activation_function": "relu", "scale_embedding": True, "encoder_layerdrop": 0,
             "decoder_layerdrop": 0, "tokenizer_class": "NllbTokenizer", "use_cache": True,
             "activation_dropout": 0.0, "init_std": 0.02, "tie_word_embeddings": False},
}
GENERATION = {"nllb": {"bos_token_id": 0, "decoder_start_token_id": 2, "eos_token_id": 2,
                       "pad_token_id": 1, "max_length": 200, "forced_bos_token_id": 88}}
SOURCE_LENGTHS = (1, 3, 6, 13)
TARGET_LENGTHS = (2, 5, 0, 11)
MAX_NEW_TOKENS = 8
BEAM = 3
EPS = 1e-5  # nn.LayerNorm's default


def family(config):
    """(pre_norm, layernorm_embedding, final layer_norm, learned positions) of the model type."""
    return {"bart": (False, True, False, True), "mbart": (True, True, True, True),
            "m2m_100": (True, False, True, False)}[config["model_type"]]


def forced_bos(name, config):
    return GENERATION.get(name, config).get("forced_bos_token_id")


def make_weights(config, seed):
    g = torch.Generator().manual_seed(seed)
    d, vocab = config["d_model"], config["vocab_size"]
    _, embedding_norm, final_norm, learned = family(config)

    def rand(*shape, std=0.3):
        # float32 values: the folder stores F32, the reference computes on them in float64.
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()

    def layer_norm_weights(name):
        w[name + ".weight"] = 1 + rand(d, std=0.1)
        w[name + ".bias"] = rand(d, std=0.1)

    w = {"model.shared.weight": rand(vocab, d, std=0.5)}
    head = "model.shared.weight" if config["tie_word_embeddings"] else "lm_head.weight"
    if head not in w:
        w[head] = rand(vocab, d)
    if config["model_type"] != "m2m_100" and config["tie_word_embeddings"]:
        w["final_logits_bias"] = rand(1, vocab, std=0.5)
    for stack in ("encoder", "decoder"):
        p = f"model.{stack}."
        if learned:
            w[p + "embed_positions.weight"] = rand(config["max_position_embeddings"] + 2, d, std=0.5)
        if embedding_norm:
            layer_norm_weights(p + "layernorm_embedding")
        if final_norm:
            layer_norm_weights(p + "layer_norm")
        ffn = config[f"{stack}_ffn_dim"]
        for i in range(config[f"{stack}_layers"]):
            p = f"model.{stack}.layers.{i}."
            for a in ["self_attn"] + (["encoder_attn"] if stack == "decoder" else []):
                for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    w[p + f"{a}.{n}.weight"] = rand(d, d)
                    w[p + f"{a}.{n}.bias"] = rand(d, std=0.1)
                layer_norm_weights(p + f"{a}_layer_norm")
            w[p + "fc1.weight"], w[p + "fc1.bias"] = rand(ffn, d), rand(ffn, std=0.1)
            w[p + "fc2.weight"], w[p + "fc2.bias"] = rand(d, ffn), rand(d, std=0.1)
            layer_norm_weights(p + "final_layer_norm")
    # A short output row and a low bias keep </s> out of the best candidates, so that the beam
    # reference needs no finished-hypothesis rules (beam() asserts it).
    w[head][config["eos_token_id"]] *= 0.05
    if "final_logits_bias" in w:
        w["final_logits_bias"][0, config["eos_token_id"]] = -2.0
    return w, head


def sinusoidal_table(n_rows, dim, padding_idx):
    """M2M100SinusoidalPositionalEmbedding.get_embedding (even dim), in float64."""
    half = dim // 2
    freq = torch.exp(torch.arange(half) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(n_rows)[:, None] * freq[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    table[padding_idx] = 0
    return table


def positions(config, w, stack, ids):
    if family(config)[3]:  # BartLearnedPositionalEmbedding / MBart's: row t + 2
        return w[f"model.{stack}.embed_positions.weight"][torch.arange(len(ids)) + 2]
    pad = config["pad_token_id"]
    mask = (torch.tensor(ids) != pad).long()  # create_position_ids_from_input_ids
    position_ids = torch.cumsum(mask, 0) * mask + pad
    table = sinusoidal_table(config["max_position_embeddings"] + 4, config["d_model"], pad)
    return table[position_ids]


def layer_norm(x, w, name):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], EPS)


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def attention(w, p, heads, x, memory, allowed):
    """BartAttention: q scaled by head_dim^-0.5, biases on every projection."""
    d = x.shape[-1]
    hd = d // heads
    q = (linear(x, w, p + ".q_proj") * hd ** -0.5).view(-1, heads, hd).transpose(0, 1)
    k = linear(memory, w, p + ".k_proj").view(-1, heads, hd).transpose(0, 1)
    v = linear(memory, w, p + ".v_proj").view(-1, heads, hd).transpose(0, 1)
    scores = (q @ k.transpose(1, 2)).masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return linear(out.transpose(0, 1).reshape(x.shape[0], d), w, p + ".out_proj")


def activation(config, x):
    return {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[config["activation_function"]](x)


def sublayer(config, w, x, norm_name, f):
    """Post-norm (BART): LN(x + f(x)); pre-norm (mBART, M2M-100): x + f(LN(x))."""
    if family(config)[0]:
        return x + f(layer_norm(x, w, norm_name))
    return layer_norm(x + f(x), w, norm_name)


def embed(config, w, stack, ids):
    scale = math.sqrt(config["d_model"]) if config["scale_embedding"] else 1.0
    x = w["model.shared.weight"][torch.tensor(ids)] * scale + positions(config, w, stack, ids)
    return layer_norm(x, w, f"model.{stack}.layernorm_embedding") if family(config)[1] else x


def encode(config, w, source):
    x = embed(config, w, "encoder", source)
    heads = config["encoder_attention_heads"]
    everything = torch.ones(len(source), len(source), dtype=torch.bool)
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        x = sublayer(config, w, x, p + "self_attn_layer_norm",
                     lambda h: attention(w, p + "self_attn", heads, h, h, everything))
        x = sublayer(config, w, x, p + "final_layer_norm",
                     lambda h: linear(activation(config, linear(h, w, p + "fc1")), w, p + "fc2"))
    return layer_norm(x, w, "model.encoder.layer_norm") if family(config)[2] else x


def decode(config, w, head, memory, decoder_input):
    """Logits [len(decoder_input), vocab], teacher-forced."""
    T, heads = len(decoder_input), config["decoder_attention_heads"]
    y = embed(config, w, "decoder", decoder_input)
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    everything = torch.ones(T, memory.shape[0], dtype=torch.bool)
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        y = sublayer(config, w, y, p + "self_attn_layer_norm",
                     lambda h: attention(w, p + "self_attn", heads, h, h, causal))
        y = sublayer(config, w, y, p + "encoder_attn_layer_norm",
                     lambda h: attention(w, p + "encoder_attn", heads, h, memory, everything))
        y = sublayer(config, w, y, p + "final_layer_norm",
                     lambda h: linear(activation(config, linear(h, w, p + "fc1")), w, p + "fc2"))
    if family(config)[2]:
        y = layer_norm(y, w, "model.decoder.layer_norm")
    logits = y @ w[head].T
    return logits + w["final_logits_bias"] if "final_logits_bias" in w else logits


def greedy(config, w, head, memory, forced):
    """Argmax from decoder_start_token_id, the forced token first, until eos (not output) or
    MAX_NEW_TOKENS tokens (the forced one included); also the smallest margin between the best
    and the second best logit of the chosen tokens."""
    ids, gap = [config["decoder_start_token_id"]], float("inf")
    if forced is not None:
        ids.append(forced)
    while len(ids) - 1 < MAX_NEW_TOKENS:
        top = decode(config, w, head, memory, ids)[-1].topk(2)
        gap = min(gap, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        if nxt == config["eos_token_id"]:
            break
        ids.append(nxt)
    return ids[1:], gap


def beam(config, w, head, memory, forced):
    """Beam search over MAX_NEW_TOKENS steps (the forced first token one of them, log
    probability 0 as HF's processor makes it) keeping the BEAM best by total log probability.
    The end token must never be among any step's 2 * BEAM best candidates (asserted), so
    finished hypotheses and length penalties cannot change the result."""
    start = [config["decoder_start_token_id"]] + ([forced] if forced is not None else [])
    beams = [(0.0, start)]
    for _ in range(MAX_NEW_TOKENS - (len(start) - 1)):
        candidates = []
        for score, ids in beams:
            logp = torch.log_softmax(decode(config, w, head, memory, ids)[-1], dim=-1)
            candidates += [(score + float(logp[t]), ids + [t]) for t in range(config["vocab_size"])]
        candidates.sort(key=lambda c: -c[0])
        assert all(c[1][-1] != config["eos_token_id"] for c in candidates[:2 * BEAM]), "eos in beam"
        beams = candidates[:BEAM]
    return beams[0][1][1:], beams[0][0] - beams[1][0]


def tokenizer_json(config):
    """A word-level tokenizer.json over the ids (w3 .. w89 after <s> <pad> </s>), with BART's
    RobertaProcessing: what lets `masque run --model DIR` pick a tokenizer for the folder."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, config["vocab_size"])})
    roberta = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
               "trim_offsets": True, "add_prefix_space": False}
    return {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": roberta if config["model_type"] == "bart" else None,
            "decoder": None, "model": {"type": "WordLevel", "unk_token": "<unk>", "vocab": vocab}}


def write_folder(folder, config, w, generation=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(config)))
    if generation:
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))
    write_safetensors(folder / "model.safetensors", w)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    reference = {}
    for n, (name, variant) in enumerate(VARIANTS.items()):
        config = dict(COMMON, **variant)
        w, head = make_weights(config, seed=1357 + n)
        write_folder(out / name, config, w, GENERATION.get(name))
        if name == "bart-tied":  # BartModel: the same tensors without the prefix and the head
            write_folder(out / "bart-model", dict(config, architectures=["BartModel"]),
                         {k[len("model."):]: v for k, v in w.items() if k.startswith("model.")})
        forced = forced_bos(name, config)
        g = torch.Generator().manual_seed(77 + n)
        low = 3  # no bos, pad or eos inside sources and targets
        pairs = []
        for src_len, tgt_len in zip(SOURCE_LENGTHS, TARGET_LENGTHS):
            # Sources end with </s> as the tokenizers write them.
            source = torch.randint(low, config["vocab_size"], (src_len - 1,), generator=g).tolist()
            source.append(config["eos_token_id"])
            target = torch.randint(low, config["vocab_size"], (tgt_len,), generator=g).tolist()
            memory = encode(config, w, source)
            decoder_input = [config["decoder_start_token_id"]] + ([forced] if forced is not None else []) + target
            greedy_ids, greedy_gap = greedy(config, w, head, memory, forced)
            beam_ids, beam_gap = beam(config, w, head, memory, forced)
            pairs.append({"source": source, "decoder_input": decoder_input,
                          "logits": decode(config, w, head, memory, decoder_input).tolist(),
                          "greedy_ids": greedy_ids, "greedy_gap": greedy_gap,
                          "beam_ids": beam_ids, "beam_gap": beam_gap})
        reference[name] = {"plugin": config["model_type"], "pairs": pairs,
                           "max_new_tokens": MAX_NEW_TOKENS, "beam_size": BEAM,
                           "eos": config["eos_token_id"], "forced_bos": forced if forced is not None else -1}
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
