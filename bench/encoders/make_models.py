#!/usr/bin/python3
"""Hugging Face BertModel folders with random seeded weights, in real model shapes.

    make_models.py OUT_DIR [NAME ...]      (default: every shape in SHAPES)

Writes OUT_DIR/NAME/{config.json, model.safetensors, vocab.txt}: the config of the shape
(model_type bert, architectures BertModel), f32 weights under the names a bare `BertModel`
saves (no `bert.` prefix, no MLM head; the pooler is there, as BertModel has one), and
vocab.txt as a link to the real bert-base-uncased vocabulary in ../shared/tokenizers (both
shapes use that 30,522-token vocabulary; masque's `--model DIR` wants a tokenizer file even
when the records are ids). Matrices and embeddings are normal with std initializer_range
(0.02), as Hugging Face initialises BERT, so activations have realistic ranges; biases and
LayerNorm offsets get a small normal value and LayerNorm gains 1 + a small one instead of
HF's zeros and ones, so a side that dropped a bias or a gain would not agree. Each tensor
depends only on the seed and its name. A folder already written (make_models.json present,
same shape) is kept.
"""
import json
import sys
import zlib
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
from safetensors_file import write_safetensors  # noqa: E402  (the tests' f32 writer)

VOCAB = ROOT.parent / "shared" / "tokenizers" / "bert-base-uncased" / "vocab.txt"
SEED = 49

BASE = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522,
        "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu",
        "layer_norm_eps": 1e-12, "initializer_range": 0.02, "pad_token_id": 0,
        "position_embedding_type": "absolute", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "torch_dtype": "float32"}
SHAPES = {
    # google-bert/bert-base-uncased
    "bert-base": dict(BASE, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
    # sentence-transformers/all-MiniLM-L6-v2 (its BertModel: 6 x 384, 12 heads, 1536)
    "minilm-l6": dict(BASE, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                      intermediate_size=1536),
}


def tensor_shapes(c):
    """name -> shape, as BertModel's state_dict has them."""
    h, i = c["hidden_size"], c["intermediate_size"]
    s = {"embeddings.word_embeddings.weight": (c["vocab_size"], h),
         "embeddings.position_embeddings.weight": (c["max_position_embeddings"], h),
         "embeddings.token_type_embeddings.weight": (c["type_vocab_size"], h),
         "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,),
         "pooler.dense.weight": (h, h), "pooler.dense.bias": (h,)}
    for l in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        for name, (o, n) in {"attention.self.query": (h, h), "attention.self.key": (h, h),
                             "attention.self.value": (h, h), "attention.output.dense": (h, h),
                             "intermediate.dense": (i, h), "output.dense": (h, i)}.items():
            s[p + name + ".weight"] = (o, n)
            s[p + name + ".bias"] = (o,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            s[p + name + ".weight"] = (h,)
            s[p + name + ".bias"] = (h,)
    return s


def make_tensor(name, shape, std):
    g = torch.Generator().manual_seed(SEED * 1_000_003 + zlib.crc32(name.encode()))
    x = torch.randn(*shape, generator=g)
    if "LayerNorm.weight" in name:
        return 1 + 0.05 * x
    if name.endswith(".bias"):
        return 0.02 * x
    return std * x


def write_folder(out, name):
    config = SHAPES[name]
    folder = out / name
    stamp = folder / "make_models.json"
    if stamp.exists() and json.loads(stamp.read_text()) == {"config": config, "seed": SEED}:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tensors = {n: make_tensor(n, s, config["initializer_range"])
               for n, s in tensor_shapes(config).items()}
    write_safetensors(folder / "model.safetensors", tensors)
    vocab = folder / "vocab.txt"
    if vocab.is_symlink() or vocab.exists():
        vocab.unlink()
    vocab.symlink_to(VOCAB)
    stamp.write_text(json.dumps({"config": config, "seed": SEED}))
    print(f"make_models: wrote {folder} ({sum(t.numel() for t in tensors.values()) / 1e6:.1f} M"
          " parameters)", file=sys.stderr)
    return folder


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    for name in sys.argv[2:] or SHAPES:
        if name not in SHAPES:
            sys.exit(f"make_models: unknown shape {name!r} (one of {', '.join(SHAPES)})")
        write_folder(out, name)


if __name__ == "__main__":
    main()
