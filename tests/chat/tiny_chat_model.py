#!/usr/bin/python3
"""Writes a tiny random-weight Qwen3 chat folder for the chat tests of `masque run --chat`.

    tiny_chat_model.py TOKENIZERS_JSON_DIR OUT_DIR

OUT_DIR gets the real Qwen3 tokenizer.json and tokenizer_config.json (its chat template) from
../shared/tokenizers-json/qwen3, a config.json of the Qwen3 architecture at toy size (hidden 16,
one layer) with the tokenizer's vocabulary, and seeded random weights: a model whose outputs mean
nothing, but whose prompt is the real template's. Deterministic (torch.manual_seed).
"""
import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402


def main():
    src, out = Path(sys.argv[1]) / "qwen3", Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / name, out / name)
    vocab = 151936  # Qwen3's embedding rows (the tokenizer's ids and some spare)
    hidden, inter, heads, kv, hd = 16, 32, 2, 1, 8
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
              "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 1,
              "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
              "vocab_size": vocab, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": True, "hidden_act": "silu",
              "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    g = torch.Generator().manual_seed(48)

    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.5

    p = "model.layers.0."
    w = {"model.embed_tokens.weight": normal(vocab, hidden), "model.norm.weight": torch.ones(hidden),
         p + "input_layernorm.weight": torch.ones(hidden),
         p + "post_attention_layernorm.weight": torch.ones(hidden),
         p + "self_attn.q_proj.weight": normal(heads * hd, hidden),
         p + "self_attn.k_proj.weight": normal(kv * hd, hidden),
         p + "self_attn.v_proj.weight": normal(kv * hd, hidden),
         p + "self_attn.o_proj.weight": normal(hidden, heads * hd),
         p + "self_attn.q_norm.weight": torch.ones(hd), p + "self_attn.k_norm.weight": torch.ones(hd),
         p + "mlp.gate_proj.weight": normal(inter, hidden),
         p + "mlp.up_proj.weight": normal(inter, hidden),
         p + "mlp.down_proj.weight": normal(hidden, inter)}
    write_safetensors(out / "model.safetensors", w)


if __name__ == "__main__":
    main()
