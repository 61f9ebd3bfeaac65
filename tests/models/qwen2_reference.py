#!/usr/bin/env python3
"""Random-weight Qwen2 folders (Hugging Face layout) and their float64 references.

Usage: qwen2_reference.py OUT_DIR

Writes OUT_DIR/qwen2-tied, OUT_DIR/qwen2-window, OUT_DIR/llama-window, OUT_DIR/mistral,
OUT_DIR/llama3-rope, OUT_DIR/llama-linear-rope and OUT_DIR/qwen3 (config.json, model.safetensors) and OUT_DIR/reference.json. The network is a plain-torch float64 transcription of Hugging Face's
modeling_qwen2.py (Qwen2ForCausalLM): RMSNorm pre-norm decoder layers, q/k/v projections with
biases and an o_proj without, rotate_half RoPE with inv_freq = 1 / theta^(2i/d), grouped-query
attention (repeat_kv), causal masking with Qwen2's sliding window on the layers its config
selects (key j hidden from query i when i - j >= sliding_window), a SiLU-gated MLP, a final
norm and a tied or separate lm_head. llama-window is the same network as a LlamaConfig without
biases whose Mistral-style sliding_window holds in every layer, mistral the same network as a
MistralConfig with a head_dim other than hidden_size / heads; llama3-rope and llama-linear-rope
rescale the RoPE frequencies as their rope_scaling says (modeling_rope_utils.py's llama3 and
linear rules); qwen3 is modeling_qwen3.py's Qwen3ForCausalLM: q and k RMS-normed per head
(q_norm, k_norm) before the rotation. python3-torch only;
deterministic (fixed seeds).
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
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "torch_dtype": "float32",
}
VARIANTS = {
    # sliding_window without use_sliding_window: Qwen2Config ignores it.
    "qwen2-tied": {"tie_word_embeddings": True, "use_sliding_window": False,
                   "sliding_window": 4, "max_window_layers": 0},
    # layers max_window_layers.. (here layer 1) attend within 4 tokens.
    "qwen2-window": {"tie_word_embeddings": False, "use_sliding_window": True,
                     "sliding_window": 4, "max_window_layers": 1},
    # a llama config with a sliding_window: every layer windowed; no biases.
    "llama-window": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                     "tie_word_embeddings": False, "sliding_window": 4, "attention_bias": False},
    # Llama 3.1's rope_scaling. head_dim 8 at theta 100: wavelengths 6.3, 19.9, 62.8 and 199,
    # against 32 / 4 = 8 and 32 / 1 = 32: one frequency kept, one blended, two divided.
    "llama3-rope": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                    "tie_word_embeddings": True, "attention_bias": False, "rope_theta": 100.0,
                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 32}},
    # Mistral: a head_dim of its own (16 against 32 / 4 heads) and a window in every layer.
    "mistral": {"model_type": "mistral", "architectures": ["MistralForCausalLM"],
                "tie_word_embeddings": False, "sliding_window": 4, "head_dim": 16},
    # The older spelling of a linear scaling.
    "llama-linear-rope": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                          "tie_word_embeddings": False, "attention_bias": False,
                          "rope_scaling": {"type": "linear", "factor": 4.0}},
    # Qwen3: q and k RMS-normed per head (q_norm, k_norm over head_dim) before RoPE, a head_dim
    # of its own, no biases, Qwen2's sliding window on layers max_window_layers..
    "qwen3": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
              "tie_word_embeddings": False, "head_dim": 16, "attention_bias": False,
              "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    # Phi-3 (modeling_phi3.py): q|k|v in one qkv_proj, gate|up in one gate_up_proj (gate first:
    # gate, up = gate_up.chunk(2)), the network Llama's, a window in every layer, no biases.
    "phi3": {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
             "tie_word_embeddings": False, "sliding_window": 4, "attention_bias": False},
}


def checkpoint_tensors(config, w):
    """The tensors as the family's checkpoints store them: Phi-3 fuses q|k|v and gate|up."""
    if config["model_type"] != "phi3":
        return w
    out = dict(w)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [out.pop(p + f"self_attn.{n}_proj.weight") for n in ("q", "k", "v")])
        out[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [out.pop(p + "mlp.gate_proj.weight"), out.pop(p + "mlp.up_proj.weight")])
    return out


def head_dim(config):
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def has_bias(config):
    """Qwen2 has biases on q, k and v; Llama and Qwen3 (attention_bias false) none."""
    return config["model_type"] == "qwen2"


def has_qk_norm(config):
    """modeling_qwen3.py: Qwen3Attention's q_norm and k_norm (Qwen3RMSNorm over head_dim)."""
    return config["model_type"] == "qwen3"


def make_weights(config, seed):
    g = torch.Generator().manual_seed(seed)
    c, inner = config["hidden_size"], config["intermediate_size"]
    heads, kv, v = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]
    d = head_dim(config)

    def rand(*shape, std=0.3):
        # float32 values: the folder stores F32, the reference computes on them in float64.
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()

    w = {"model.embed_tokens.weight": rand(v, c, std=1.0), "model.norm.weight": 1 + rand(c, std=0.1)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + rand(c, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + rand(c, std=0.1)
        for name, out in (("q", heads * d), ("k", kv * d), ("v", kv * d)):
            w[p + f"self_attn.{name}_proj.weight"] = rand(out, c)
            if has_bias(config):
                w[p + f"self_attn.{name}_proj.bias"] = rand(out, std=0.2)
        if has_qk_norm(config):
            w[p + "self_attn.q_norm.weight"] = 1 + rand(d, std=0.1)
            w[p + "self_attn.k_norm.weight"] = 1 + rand(d, std=0.1)
        w[p + "self_attn.o_proj.weight"] = rand(c, heads * d)
        w[p + "mlp.gate_proj.weight"] = rand(inner, c)
        w[p + "mlp.up_proj.weight"] = rand(inner, c)
        w[p + "mlp.down_proj.weight"] = rand(c, inner)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(v, c)
    return w




def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def layer_windows(config):
    """Qwen2Config.layer_types: sliding_attention for layers >= max_window_layers (with
    use_sliding_window); a llama, mistral or phi3 config's sliding_window: every layer."""
    if config["model_type"] in ("llama", "mistral", "phi3"):
        return [config.get("sliding_window")] * config["num_hidden_layers"]
    window = config["sliding_window"] if config["use_sliding_window"] else None
    return [window if window is not None and i >= config["max_window_layers"] else None
            for i in range(config["num_hidden_layers"])]


def rope_inv_freq(config, d):
    """modeling_rope_utils: _compute_default_rope_parameters, then _compute_linear_scaling_rope_
    parameters (inv_freq / factor) or _compute_llama3_parameters."""
    inv_freq = 1.0 / (config["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).double() / d))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    assert kind == "default", kind
    return inv_freq


def forward(config, w, ids, mask_window=None):
    """Logits [T, V] of one sequence (positions 0..T-1). mask_window: the windowed-causal mask
    strategy's window on top of the model's own (the narrower holds)."""
    c, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    d, T = head_dim(config), len(ids)
    eps = config["rms_norm_eps"]
    inv_freq = rope_inv_freq(config, d)
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    qi = torch.arange(T).unsqueeze(1)
    kj = torch.arange(T).unsqueeze(0)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i, window in enumerate(layer_windows(config)):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T +
                   (w[p + f"self_attn.{n}_proj.bias"] if has_bias(config) else 0)
                   for n in ("q", "k", "v"))
        q = q.view(T, heads, d).transpose(0, 1)
        k = k.view(T, kv, d).transpose(0, 1)
        v = v.view(T, kv, d).transpose(0, 1)
        if has_qk_norm(config):  # q_norm(q_proj(x).view(hidden_shape)), before the rotation
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv, dim=0)  # repeat_kv
        v = v.repeat_interleave(heads // kv, dim=0)
        allowed = kj <= qi
        for win in (window, mask_window):
            if win is not None:
                allowed = allowed & (qi - kj < win)
        scores = (q @ k.transpose(1, 2)) * d ** -0.5
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + attn.transpose(0, 1).reshape(T, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def greedy(config, w, prompt, steps):
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(forward(config, w, ids)[-1].argmax()))
    return ids[len(prompt):]


def beam(config, w, prompt, beam_size, steps):
    """Beam search without an end token: keep the best beam_size sequences by total log
    probability at every step; the best at the end."""
    beams = [(0.0, list(prompt))]
    for _ in range(steps):
        candidates = []
        for score, ids in beams:
            logp = torch.log_softmax(forward(config, w, ids)[-1], dim=-1)
            for t in range(config["vocab_size"]):
                candidates.append((score + float(logp[t]), ids + [t]))
        candidates.sort(key=lambda c: -c[0])
        beams = candidates[:beam_size]
    return beams[0][1][len(prompt):], beams[0][0] - beams[1][0]


def nll(logits, ids):
    logp = torch.log_softmax(logits, dim=-1)
    return [-float(logp[t, ids[t + 1]]) for t in range(len(ids) - 1)]


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    reference = {}
    for n, (name, variant) in enumerate(VARIANTS.items()):
        config = dict(BASE, **variant)
        w = make_weights(config, seed=1234 + n)
        folder = out / name
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        write_safetensors(folder / "model.safetensors", checkpoint_tensors(config, w))
        g = torch.Generator().manual_seed(99 + n)
        sequences = []
        for length in (1, 3, 4, 5, 9, 12):
            ids = [1] + torch.randint(2, 95, (length - 1,), generator=g).tolist()
            logits = forward(config, w, ids)
            sequences.append({"ids": ids, "logits": logits.tolist(), "token_nll": nll(logits, ids),
                              "window3_logits": forward(config, w, ids, mask_window=3).tolist()})
        prompt = sequences[3]["ids"]
        beam_ids, beam_gap = beam(config, w, prompt, 3, 6)
        reference[name] = {"plugin": config["model_type"], "sequences": sequences, "prompt": prompt,
                           "greedy_ids": greedy(config, w, prompt, 10),
                           "beam3_ids": beam_ids, "beam3_gap": beam_gap}
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
