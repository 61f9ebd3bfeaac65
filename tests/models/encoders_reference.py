#!/usr/bin/python3
"""Random-weight RoBERTa / XLM-RoBERTa and DistilBERT folders and their float64 references,
for the roberta and distilbert plugins.

    encoders_reference.py OUT_DIR

Writes OUT_DIR/NAME/ (config.json, model.safetensors) for each of VARIANTS and
OUT_DIR/reference.json. The networks are plain-torch float64 transcriptions of Hugging Face's
modeling_roberta.py (RobertaEmbeddings with create_position_ids_from_input_ids: real tokens
numbered from padding_idx + 1; post-LayerNorm RobertaLayer blocks with exact gelu;
RobertaLMHead: dense, gelu, layer_norm, decoder tied to the word embeddings, bias;
RobertaClassificationHead: dense + tanh on the first token, out_proj) and
modeling_distilbert.py (Embeddings without token types, positions from 0; TransformerBlock:
sa_layer_norm(attention + x), output_layer_norm(ffn + x); the MLM head vocab_transform, gelu,
vocab_layer_norm, vocab_projector tied; the classifier pre_classifier, ReLU, classifier on the
first token; its LayerNorms at eps 1e-12). Deterministic: a seed per variant.
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
    "distilbert-mlm": ("distilbert", "DistilBertForMaskedLM", "distilbert.", "mlm"),
    "distilbert-classifier": ("distilbert", "DistilBertForSequenceClassification", "distilbert.",
                              "labels"),
}
# Tensor names per family: RoBERTa's (BERT's), DistilBERT's.
NAMES = {
    "roberta": {"layers": "encoder.layer.", "query": "attention.self.query",
                "key": "attention.self.key", "value": "attention.self.value",
                "attention_out": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
                "ffn_in": "intermediate.dense", "ffn_out": "output.dense", "ffn_norm": "output.LayerNorm",
                "mlm_dense": "lm_head.dense", "mlm_norm": "lm_head.layer_norm", "mlm_bias": "lm_head.bias",
                "cls_dense": "classifier.dense", "cls_out": "classifier.out_proj"},
    "distilbert": {"layers": "transformer.layer.", "query": "attention.q_lin",
                   "key": "attention.k_lin", "value": "attention.v_lin",
                   "attention_out": "attention.out_lin", "attention_norm": "sa_layer_norm",
                   "ffn_in": "ffn.lin1", "ffn_out": "ffn.lin2", "ffn_norm": "output_layer_norm",
                   "mlm_dense": "vocab_transform", "mlm_norm": "vocab_layer_norm",
                   "mlm_bias": "vocab_projector.bias", "cls_dense": "pre_classifier",
                   "cls_out": "classifier"},
}


def family(model_type):
    return "distilbert" if model_type == "distilbert" else "roberta"
SEQUENCES = [[0, 5, 17, 9, 2], [0, 33, 2], [0, 7, 8, 9, 10, 11, 12, 2]]


def make_weights(fam, prefix, head, seed):
    n, g = NAMES[fam], torch.Generator().manual_seed(seed)

    def normal(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 0.3

    def gain(size):
        return 1 + normal(size) * 0.3

    w = {prefix + "embeddings.word_embeddings.weight": normal(VOCAB, H),
         prefix + "embeddings.position_embeddings.weight": normal(TABLE, H),
         prefix + "embeddings.LayerNorm.weight": gain(H),
         prefix + "embeddings.LayerNorm.bias": normal(H)}
    if fam == "roberta":
        w[prefix + "embeddings.token_type_embeddings.weight"] = normal(1, H)
    for l in range(LAYERS):
        q = f"{prefix}{n['layers']}{l}."
        for key, (o, i) in {"query": (H, H), "key": (H, H), "value": (H, H),
                            "attention_out": (H, H), "ffn_in": (INNER, H),
                            "ffn_out": (H, INNER)}.items():
            w[q + n[key] + ".weight"] = normal(o, i)
            w[q + n[key] + ".bias"] = normal(o)
        for key in ("attention_norm", "ffn_norm"):
            w[q + n[key] + ".weight"] = gain(H)
            w[q + n[key] + ".bias"] = normal(H)
    if head == "mlm":
        w[n["mlm_dense"] + ".weight"] = normal(H, H)
        w[n["mlm_dense"] + ".bias"] = normal(H)
        w[n["mlm_norm"] + ".weight"] = gain(H)
        w[n["mlm_norm"] + ".bias"] = normal(H)
        w[n["mlm_bias"]] = normal(VOCAB)
    if head == "labels":
        w[n["cls_dense"] + ".weight"] = normal(H, H)
        w[n["cls_dense"] + ".bias"] = normal(H)
        w[n["cls_out"] + ".weight"] = normal(3, H)
        w[n["cls_out"] + ".bias"] = normal(3)
    return w


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def linear(w, name, x):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def encode(fam, w, prefix, ids, eps):
    n = NAMES[fam]
    ids = torch.tensor(ids)
    if fam == "roberta":
        mask = (ids != PAD).long()
        positions = torch.cumsum(mask, 0) * mask + PAD  # create_position_ids_from_input_ids
    else:
        positions = torch.arange(len(ids))
    x = (w[prefix + "embeddings.word_embeddings.weight"][ids]
         + w[prefix + "embeddings.position_embeddings.weight"][positions])
    if fam == "roberta":
        x = x + w[prefix + "embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w[prefix + "embeddings.LayerNorm.weight"],
                   w[prefix + "embeddings.LayerNorm.bias"], eps)
    t, d = len(ids), H // HEADS
    for l in range(LAYERS):
        q = f"{prefix}{n['layers']}{l}."
        heads = [linear(w, q + n[k], x).view(t, HEADS, d).transpose(0, 1)
                 for k in ("query", "key", "value")]
        scores = heads[0] @ heads[1].transpose(1, 2) / math.sqrt(d)
        att = (torch.softmax(scores, -1) @ heads[2]).transpose(0, 1).reshape(t, H)
        x = layer_norm(linear(w, q + n["attention_out"], att) + x,
                       w[q + n["attention_norm"] + ".weight"], w[q + n["attention_norm"] + ".bias"], eps)
        inner = gelu(linear(w, q + n["ffn_in"], x))
        x = layer_norm(linear(w, q + n["ffn_out"], inner) + x,
                       w[q + n["ffn_norm"] + ".weight"], w[q + n["ffn_norm"] + ".bias"], eps)
    return x


def config_of(model_type, arch, head):
    if model_type == "distilbert":
        config = {"architectures": [arch], "model_type": model_type, "vocab_size": VOCAB,
                  "dim": H, "n_layers": LAYERS, "n_heads": HEADS, "hidden_dim": INNER,
                  "max_position_embeddings": TABLE, "activation": "gelu",
                  "sinusoidal_pos_embds": False, "pad_token_id": 0}
    else:
        config = {"architectures": [arch], "model_type": model_type, "vocab_size": VOCAB,
                  "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
                  "intermediate_size": INNER, "max_position_embeddings": TABLE,
                  "type_vocab_size": 1, "layer_norm_eps": EPS, "hidden_act": "gelu",
                  "pad_token_id": PAD, "bos_token_id": 0, "eos_token_id": 2}
    if head == "labels":
        config["id2label"] = {"0": "negative", "1": "neutral", "2": "positive"}
    return config


def main():
    out = Path(sys.argv[1])
    reference = {}
    for seed, (name, (model_type, arch, prefix, head)) in enumerate(VARIANTS.items()):
        fam, n = family(model_type), NAMES[family(model_type)]
        eps = 1e-12 if fam == "distilbert" else EPS
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config_of(model_type, arch, head), indent=1))
        # The file holds float32: the reference computes with exactly those values.
        w = {k: v.float().double() for k, v in make_weights(fam, prefix, head, 44 + seed).items()}
        write_safetensors(folder / "model.safetensors", w)
        rows = []
        for ids in SEQUENCES:
            x = encode(fam, w, prefix, ids, eps)
            row = {"ids": ids, "hidden": x.tolist()}
            if head == "mlm":
                t = layer_norm(gelu(linear(w, n["mlm_dense"], x)), w[n["mlm_norm"] + ".weight"],
                               w[n["mlm_norm"] + ".bias"], eps)
                row["logits"] = (t @ w[prefix + "embeddings.word_embeddings.weight"].T
                                 + w[n["mlm_bias"]]).tolist()
            if head == "labels":
                t = linear(w, n["cls_dense"], x[0])
                t = torch.relu(t) if fam == "distilbert" else torch.tanh(t)
                row["labels"] = linear(w, n["cls_out"], t).tolist()
            rows.append(row)
        reference[name] = {"sequences": rows}
        if name == "xlmr-model":
            reference.update(sentence_folders(out, folder, rows, w))
    (out / "reference.json").write_text(json.dumps(reference))


def sentence_folders(out, model, rows, w):
    """sentence-transformers folders over the XLMRobertaModel: modules.json with a Transformer,
    a Pooling (1_Pooling/config.json) and maybe a Normalize module, as SentenceTransformer saves
    them, and what encode() gives: Pooling's mean (sum over the attention mask / its count) or
    max, then (xlmr-sentence-dense) a Dense module (2_Dense: config.json and model.safetensors
    with linear.weight / linear.bias, Tanh(W x + b), as models.Dense saves itself), then
    F.normalize. A vocab.txt lets `masque run --model` build a pipeline (ids in)."""
    refs = {}
    g = torch.Generator().manual_seed(808)
    dense_w = (torch.randn(6, H, generator=g) * 0.5).float().double()
    dense_b = (torch.randn(6, generator=g) * 0.1).float().double()
    for name, mode, normalize, dense in (("xlmr-sentence-mean", "mean", True, False),
                                         ("xlmr-sentence-max", "max", False, False),
                                         ("xlmr-sentence-dense", "mean", True, True)):
        folder = out / name
        (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            (folder / f).write_bytes((model / f).read_bytes())
        (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + "".join(f"[unused{i}]\n" for i in range(VOCAB - 5)))
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if dense:
            modules.append({"idx": 2, "name": "2", "path": "2_Dense",
                            "type": "sentence_transformers.models.Dense"})
            (folder / "2_Dense").mkdir(exist_ok=True)
            (folder / "2_Dense" / "config.json").write_text(json.dumps(
                {"in_features": H, "out_features": 6, "bias": True,
                 "activation_function": "torch.nn.modules.activation.Tanh"}, indent=1))
            write_safetensors(folder / "2_Dense" / "model.safetensors",
                              {"linear.weight": dense_w, "linear.bias": dense_b})
        if normalize:
            modules.append({"idx": len(modules), "name": str(len(modules)),
                            "path": f"{len(modules)}_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        (folder / "modules.json").write_text(json.dumps(modules, indent=1))
        pooling = {"word_embedding_dimension": H, "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": mode == "max",
                   "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
                   "pooling_mode_lasttoken": False, "include_prompt": True}
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=1))
        vectors = []
        for row in rows:
            h = torch.tensor(row["hidden"], dtype=torch.float64)
            v = h.mean(0) if mode == "mean" else h.max(0).values
            if dense:
                v = torch.tanh(dense_w @ v + dense_b)
            if normalize:
                v = torch.nn.functional.normalize(v, p=2, dim=0)
            vectors.append({"ids": row["ids"], "embedding": v.tolist()})
        refs[name] = {"sequences": vectors}
    refs.update(prompt_folder(out, model, w))
    return refs


PROMPT_TEXTS = ["w17 w9", "w33", "w7 w8 w9 w10 w11 w12"]


def prompt_folder(out, model, w):
    """xlmr-sentence-prompt: config_sentence_transformers.json's default prompt ("w5 w6 ") put
    before each text, and 1_Pooling's include_prompt: false, so the mean leaves out the first
    len(tokenize(prompt)) - 1 tokens ([CLS] w5 w6), as sentence-transformers' encode() does. Its
    vocab.txt spells XLM-R's ids: [CLS] 0, [PAD] 1, [SEP] 2, and the words w5 .. w49."""
    folder = out / "xlmr-sentence-prompt"
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        (folder / f).write_bytes((model / f).read_bytes())
    (folder / "vocab.txt").write_text(
        "[CLS]\n[PAD]\n[SEP]\n[UNK]\n[MASK]\n" + "".join(f"w{i}\n" for i in range(5, VOCAB)))
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": H, "pooling_mode_cls_token": False,
         "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
         "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
         "pooling_mode_lasttoken": False, "include_prompt": False}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "w5 w6 ", "document": ""}, "default_prompt_name": "query"}))
    prompt_length = 3  # [CLS] w5 w6 [SEP] less one
    vectors = []
    for text in PROMPT_TEXTS:
        ids = [0, 5, 6] + [int(t[1:]) for t in text.split()] + [2]
        h = encode("roberta", w, "", ids, EPS)
        vectors.append({"text": text, "ids": ids, "embedding": h[prompt_length:].mean(0).tolist()})
    return {"xlmr-sentence-prompt": {"sequences": vectors}}


if __name__ == "__main__":
    main()
