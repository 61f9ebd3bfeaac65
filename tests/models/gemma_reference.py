#!/usr/bin/env python3
"""Random-weight Gemma, Gemma 2 and Gemma 3 folders (Hugging Face layout) and their float64
references.

Usage: gemma_reference.py OUT_DIR

Writes OUT_DIR/NAME (config.json, model.safetensors) for every variant below and
OUT_DIR/reference.json. The network is a plain-torch float64 transcription of Hugging Face's
modeling_gemma.py, modeling_gemma2.py and modeling_gemma3.py (the *ForCausalLM text models):
RMSNorms that scale by (1 + weight), token embeddings times sqrt(hidden_size), rotate_half RoPE,
grouped-query attention scaled by query_pre_attn_scalar ** -0.5 (Gemma 1: head_dim ** -0.5), a
gelu_pytorch_tanh-gated MLP and a tied or separate lm_head. Gemma 2 and 3 norm each sub-layer's
output before its residual (post_attention_layernorm, post_feedforward_layernorm; the MLP's input
norm is pre_feedforward_layernorm) and slide a window over some layers (Gemma 2: the even ones;
Gemma 3: all but every sliding_window_pattern-th; or layer_types); Gemma 2 soft-caps attention
scores before the mask and the logits (cap * tanh(x / cap)); Gemma 3 norms q and k per head
before the rotation and rotates sliding layers by rope_local_base_freq, full ones by rope_theta
with rope_scaling. gemma3-multimodal is the gemma3 network saved as a
Gemma3ForConditionalGeneration folder (text_config, language_model.model.* tensors and a vision
tensor that is not read). python3-torch only; deterministic (fixed seeds).
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

BASE = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,  # not hidden_size / heads, as in every Gemma
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
    "torch_dtype": "float32",
}
VARIANTS = {
    "gemma": {"model_type": "gemma", "architectures": ["GemmaForCausalLM"],
              "tie_word_embeddings": True, "rope_theta": 10000.0},
    # Caps small enough that tanh bends the scores and logits the weights give.
    "gemma2": {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
               "tie_word_embeddings": True, "rope_theta": 10000.0, "query_pre_attn_scalar": 24,
               "sliding_window": 4, "attn_logit_softcapping": 2.0,
               "final_logit_softcapping": 8.0},
    # layer_types given, an untied head, Gemma2Config's default caps (50, 30).
    "gemma2-untied": {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
                      "tie_word_embeddings": False, "rope_theta": 10000.0,
                      "query_pre_attn_scalar": 16, "sliding_window": 3,
                      "layer_types": ["full_attention", "sliding_attention",
                                      "sliding_attention", "full_attention"]},
    # Layers 0, 1 and 3 slide (pattern 3), 2 is global: linear-scaled RoPE at 1e6 there, base
    # 100 in the sliding ones; no caps.
    "gemma3": {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
               "tie_word_embeddings": True, "rope_theta": 1000000.0,
               "rope_local_base_freq": 100.0, "rope_scaling": {"rope_type": "linear", "factor": 4.0},
               "query_pre_attn_scalar": 16, "sliding_window": 4, "sliding_window_pattern": 3,
               "final_logit_softcapping": None, "attn_logit_softcapping": None},
}


def generation(config):
    return {"gemma": 1, "gemma2": 2, "gemma3_text": 3}[config["model_type"]]


def layer_windows(config):
    """Gemma2Config / Gemma3TextConfig.layer_types: sliding_attention when bool((i + 1) %
    pattern), pattern 2 for Gemma 2 (even layers) and sliding_window_pattern for Gemma 3."""
    n = config["num_hidden_layers"]
    if generation(config) == 1:
        return [None] * n
    if "layer_types" in config:
        return [config["sliding_window"] if t == "sliding_attention" else None
                for t in config["layer_types"]]
    pattern = 2 if generation(config) == 2 else config["sliding_window_pattern"]
    return [config["sliding_window"] if (i + 1) % pattern else None for i in range(n)]


def softcaps(config):
    """(attention, final): Gemma2Config's defaults 50 and 30; None is no capping."""
    if generation(config) == 1:
        return None, None
    default = (50.0, 30.0) if generation(config) == 2 else (None, None)
    return (config.get("attn_logit_softcapping", default[0]),
            config.get("final_logit_softcapping", default[1]))


def make_weights(config, seed):
    g = torch.Generator().manual_seed(seed)
    c, inner = config["hidden_size"], config["intermediate_size"]
    heads, kv, v, d = (config["num_attention_heads"], config["num_key_value_heads"],
                       config["vocab_size"], config["head_dim"])

    def rand(*shape, std=0.3):
        # float32 values: the folder stores F32, the reference computes on them in float64.
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()

    # Norm weights are the offsets from one Gemma's checkpoints store.
    w = {"model.embed_tokens.weight": rand(v, c, std=0.1), "model.norm.weight": rand(c, std=0.1)}
    norms = ["input_layernorm", "post_attention_layernorm"]
    if generation(config) > 1:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n in norms:
            w[p + n + ".weight"] = rand(c, std=0.1)
        for name, out in (("q", heads * d), ("k", kv * d), ("v", kv * d)):
            w[p + f"self_attn.{name}_proj.weight"] = rand(out, c)
        if generation(config) == 3:
            w[p + "self_attn.q_norm.weight"] = rand(d, std=0.1)
            w[p + "self_attn.k_norm.weight"] = rand(d, std=0.1)
        w[p + "self_attn.o_proj.weight"] = rand(c, heads * d)
        w[p + "mlp.gate_proj.weight"] = rand(inner, c)
        w[p + "mlp.up_proj.weight"] = rand(inner, c)
        w[p + "mlp.down_proj.weight"] = rand(c, inner)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(v, c)
    return w


def gemma_norm(x, weight, eps):
    """GemmaRMSNorm: x / rms(x), times (1 + weight)."""
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (1.0 + weight)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(config, d, T, sliding):
    """cos, sin [T, d]: Gemma 3's sliding layers at rope_local_base_freq unscaled; otherwise
    rope_theta, divided by a linear rope_scaling's factor."""
    theta = config["rope_local_base_freq"] if sliding and generation(config) == 3 \
        else config["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).double() / d))
    scaling = config.get("rope_scaling") or {}
    if not (sliding and generation(config) == 3) and scaling.get("rope_type") == "linear":
        inv_freq = inv_freq / scaling["factor"]
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def forward(config, w, ids, mask_window=None):
    """Logits [T, V] of one sequence (positions 0..T-1). mask_window: the windowed-causal mask
    strategy's window on top of the model's own (the narrower holds)."""
    c, heads, kv, d = (config["hidden_size"], config["num_attention_heads"],
                       config["num_key_value_heads"], config["head_dim"])
    T, eps, gen = len(ids), config["rms_norm_eps"], generation(config)
    attn_cap, final_cap = softcaps(config)
    scaling = (d if gen == 1 else config["query_pre_attn_scalar"]) ** -0.5
    qi = torch.arange(T).unsqueeze(1)
    kj = torch.arange(T).unsqueeze(0)
    act = lambda x: torch.nn.functional.gelu(x, approximate="tanh")  # noqa: E731
    x = w["model.embed_tokens.weight"][torch.tensor(ids)] * (c ** 0.5)
    for i, window in enumerate(layer_windows(config)):
        p = f"model.layers.{i}."
        h = gemma_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in ("q", "k", "v"))
        q = q.view(T, heads, d).transpose(0, 1)
        k = k.view(T, kv, d).transpose(0, 1)
        v = v.view(T, kv, d).transpose(0, 1)
        if gen == 3:
            q = gemma_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = gemma_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        cos, sin = rope(config, d, T, window is not None)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv, dim=0)  # repeat_kv
        v = v.repeat_interleave(heads // kv, dim=0)
        scores = (q @ k.transpose(1, 2)) * scaling
        if attn_cap is not None:
            scores = torch.tanh(scores / attn_cap) * attn_cap
        allowed = kj <= qi
        for win in (window, mask_window):
            if win is not None:
                allowed = allowed & (qi - kj < win)
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        attn = attn.transpose(0, 1).reshape(T, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        if gen == 1:
            x = x + attn
            h = gemma_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        else:
            x = x + gemma_norm(attn, w[p + "post_attention_layernorm.weight"], eps)
            h = gemma_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        mlp = (act(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
        if gen > 1:
            mlp = gemma_norm(mlp, w[p + "post_feedforward_layernorm.weight"], eps)
        x = x + mlp
    x = gemma_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    logits = x @ head.T
    if final_cap is not None:
        logits = torch.tanh(logits / final_cap) * final_cap
    return logits


def greedy(config, w, prompt, steps):
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(forward(config, w, ids)[-1].argmax()))
    return ids[len(prompt):]


def save_multimodal(folder, config, w):
    """The gemma3 network as Gemma3ForConditionalGeneration saves it."""
    folder.mkdir(exist_ok=True)
    text = {k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")}
    text["model_type"] = "gemma3_text"
    full = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
            "text_config": text, "vision_config": {"model_type": "siglip_vision_model"},
            "eos_token_id": [1, 50], "torch_dtype": "float32"}
    (folder / "config.json").write_text(json.dumps(full, indent=2))
    tensors = {"language_model." + k: t for k, t in w.items()}
    tensors["vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"] = torch.zeros(4, 4)
    write_safetensors(folder / "model.safetensors", tensors)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    reference = {}
    for n, (name, variant) in enumerate(VARIANTS.items()):
        config = {k: v for k, v in dict(BASE, **variant).items() if v is not None or
                  k.endswith("softcapping")}
        w = make_weights(config, seed=4321 + n)
        folder = out / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        write_safetensors(folder / "model.safetensors", w)
        g = torch.Generator().manual_seed(77 + n)
        sequences = []
        for length in (1, 3, 4, 5, 9, 12):
            ids = [2] + torch.randint(3, 95, (length - 1,), generator=g).tolist()
            sequences.append({"ids": ids, "logits": forward(config, w, ids).tolist(),
                              "window3_logits": forward(config, w, ids, mask_window=3).tolist()})
        prompt = sequences[3]["ids"]
        reference[name] = {"sequences": sequences, "prompt": prompt,
                           "sliding_window": max(x or 0 for x in layer_windows(config)),
                           "greedy_ids": greedy(config, w, prompt, 10)}
        if name == "gemma3":
            save_multimodal(out / "gemma3-multimodal", config, w)
            reference["gemma3-multimodal"] = reference["gemma3"]
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
