#!/usr/bin/python3
"""Random-weight RoBERTa / XLM-RoBERTa folders and their float64 references, for the roberta plugin.

    roberta_reference.py OUT_DIR

Writes OUT_DIR/{roberta-mlm,xlmr-model,roberta-classifier}/ (config.json, model.safetensors) and
OUT_DIR/reference.json. The network is a plain-torch float64 transcription of Hugging Face's
modeling_roberta.py (RobertaEmbeddings with create_position_ids_from_input_ids: real tokens
numbered from padding_idx + 1; post-LayerNorm RobertaLayer blocks with exact gelu;
RobertaLMHead: dense, gelu, layer_norm, decoder tied to the word embeddings, bias;
RobertaClassificationHead: dense + tanh on the first token, out_proj). Deterministic:
torch.manual_seed per variant.
"""
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

H, LAYERS, HEADS, INNER, VOCAB, TABLE, PAD, EPS = 16, 2, 4, 32, 50, 20, 1, 1e-5
VARIANTS = {
    # name: (model_type, architecture, tensor prefix, head)
    "roberta-mlm": ("roberta", "RobertaForMaskedLM", "roberta.", "mlm"),
    "xlmr-model": ("xlm-roberta", "XLMRobertaModel", "", "none"),
    "roberta-classifier": ("roberta", "RobertaForSequenceClassification", "roberta.", "labels"),
}
SEQUENCES = [[0, 5, 17, 9, 2], [0, 33, 2], [0, 7, 8, 9, 10, 11, 12, 2]]


def make_weights(prefix, head, seed):
    g = torch.Generator().manual_seed(seed)

    def normal(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 0.3

    def gain(n):
        return 1 + normal(n) * 0.3

    w = {prefix + "embeddings.word_embeddings.weight": normal(VOCAB, H),
         prefix + "embeddings.position_embeddings.weight": normal(TABLE, H),
         prefix + "embeddings.token_type_embeddings.weight": normal(1, H),
         prefix + "embeddings.LayerNorm.weight": gain(H),
         prefix + "embeddings.LayerNorm.bias": normal(H)}
    for l in range(LAYERS):
        q = f"{prefix}encoder.layer.{l}."
        for name, (o, i) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                             "attention.self.value": (H, H), "attention.output.dense": (H, H),
                             "intermediate.dense": (INNER, H), "output.dense": (H, INNER)}.items():
            w[q + name + ".weight"] = normal(o, i)
            w[q + name + ".bias"] = normal(o)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[q + name + ".weight"] = gain(H)
            w[q + name + ".bias"] = normal(H)
    if head == "mlm":
        w["lm_head.dense.weight"] = normal(H, H)
        w["lm_head.dense.bias"] = normal(H)
        w["lm_head.layer_norm.weight"] = gain(H)
        w["lm_head.layer_norm.bias"] = normal(H)
        w["lm_head.bias"] = normal(VOCAB)
    if head == "labels":
        w["classifier.dense.weight"] = normal(H, H)
        w["classifier.dense.bias"] = normal(H)
        w["classifier.out_proj.weight"] = normal(3, H)
        w["classifier.out_proj.bias"] = normal(3)
    return w


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, EPS)


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def linear(w, name, x):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def encode(w, prefix, ids):
    ids = torch.tensor(ids)
    mask = (ids != PAD).long()
    positions = torch.cumsum(mask, 0) * mask + PAD  # create_position_ids_from_input_ids
    x = (w[prefix + "embeddings.word_embeddings.weight"][ids]
         + w[prefix + "embeddings.position_embeddings.weight"][positions]
         + w[prefix + "embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, w[prefix + "embeddings.LayerNorm.weight"], w[prefix + "embeddings.LayerNorm.bias"])
    n, d = len(ids), H // HEADS
    for l in range(LAYERS):
        q = f"{prefix}encoder.layer.{l}."
        heads = [linear(w, q + "attention.self." + k, x).view(n, HEADS, d).transpose(0, 1)
                 for k in ("query", "key", "value")]
        scores = heads[0] @ heads[1].transpose(1, 2) / math.sqrt(d)
        att = (torch.softmax(scores, -1) @ heads[2]).transpose(0, 1).reshape(n, H)
        x = layer_norm(linear(w, q + "attention.output.dense", att) + x,
                       w[q + "attention.output.LayerNorm.weight"], w[q + "attention.output.LayerNorm.bias"])
        inner = gelu(linear(w, q + "intermediate.dense", x))
        x = layer_norm(linear(w, q + "output.dense", inner) + x,
                       w[q + "output.LayerNorm.weight"], w[q + "output.LayerNorm.bias"])
    return x


def main():
    out = Path(sys.argv[1])
    reference = {}
    for seed, (name, (model_type, arch, prefix, head)) in enumerate(VARIANTS.items()):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        config = {"architectures": [arch], "model_type": model_type, "vocab_size": VOCAB,
                  "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
                  "intermediate_size": INNER, "max_position_embeddings": TABLE,
                  "type_vocab_size": 1, "layer_norm_eps": EPS, "hidden_act": "gelu",
                  "pad_token_id": PAD, "bos_token_id": 0, "eos_token_id": 2}
        if head == "labels":
            config["id2label"] = {"0": "negative", "1": "neutral", "2": "positive"}
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        # The file holds float32: the reference computes with exactly those values.
        w = {k: v.float().double() for k, v in make_weights(prefix, head, 44 + seed).items()}
        write_safetensors(folder / "model.safetensors", w)
        rows = []
        for ids in SEQUENCES:
            x = encode(w, prefix, ids)
            row = {"ids": ids, "hidden": x.tolist()}
            if head == "mlm":
                t = layer_norm(gelu(linear(w, "lm_head.dense", x)), w["lm_head.layer_norm.weight"],
                               w["lm_head.layer_norm.bias"])
                row["logits"] = (t @ w[prefix + "embeddings.word_embeddings.weight"].T
                                 + w["lm_head.bias"]).tolist()
            if head == "labels":
                t = torch.tanh(linear(w, "classifier.dense", x[0]))
                row["labels"] = linear(w, "classifier.out_proj", t).tolist()
            rows.append(row)
        reference[name] = {"sequences": rows}
    (out / "reference.json").write_text(json.dumps(reference))


if __name__ == "__main__":
    main()
