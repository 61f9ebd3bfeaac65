#!/usr/bin/env python3
"""Random-weight sequence-classification folders (Hugging Face layout) and float64 references.

Usage: classify_reference.py OUT_DIR

Writes OUT_DIR/bert-cls (BertForSequenceClassification, 3 labels, with a WordPiece vocab.txt),
OUT_DIR/bert-multilabel (the same weights, problem_type multi_label_classification),
OUT_DIR/gpt2-cls (GPT2ForSequenceClassification, 4 labels) and OUT_DIR/reference.json; and for
the `classify` training objective OUT_DIR/train/train.tsv (a small synthetic task: a sentence's
sentiment from the words "good" and "not"), OUT_DIR/train/losses.jsonl (100 steps of a float64
plain-torch trainer fine-tuning bert-cls on it) and OUT_DIR/train/final.json (the trained
network's logits of every training sentence).

The networks are plain-torch float64 transcriptions of Hugging Face's modeling_bert.py and
modeling_gpt2.py: BERT's embeddings (word + position + token type, LayerNorm), post-norm
layers with exact GELU, BertPooler (dense + tanh on the first token) and the classifier;
GPT-2's pre-norm blocks (Conv1D weights [in, out], gelu_new, causal attention), ln_f and
`score` (no bias) read at the last non-pad token. Each record runs alone (what HF computes
for a padded batch with its attention mask). Besides the logits the reference holds the
pooled hidden states `embed` writes: the first token's, the mean over the tokens and the last
token's final hidden state (after ln_f for GPT-2), raw and L2-normalised.

The trainer is `masque train`'s step (docs/training.md) written with torch.optim: the loss of a
step is the mean cross-entropy of its records' label logits, torch.optim.AdamW (weight decay on
matrices and embeddings only), Hugging Face's linear schedule with warmup (a LambdaLR) and
torch.nn.utils.clip_grad_norm_; batches are records kN .. kN+N-1 in file order, epoch after
epoch; no dropout.
python3-torch only; deterministic (fixed seeds).
"""
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

WORDS = ["the", "cat", "dog", "sat", "on", "a", "mat", "ran", "to", "house", "big", "small",
         "red", "blue", "and", "it", "was", "very", "not", "good"]
BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def rand(g, *shape, std=0.3):
    # float32 values: the folder stores F32, the reference computes on them in float64.
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).float().double()


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def attention(q, k, v, heads, causal):
    T, c = q.shape
    d = c // heads
    q, k, v = (t.view(T, heads, d).transpose(0, 1) for t in (q, k, v))
    s = q @ k.transpose(1, 2) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, c)


# ---- BERT ---------------------------------------------------------------------------------

BERT = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
        "hidden_size": 16, "num_attention_heads": 4, "intermediate_size": 32,
        "num_hidden_layers": 2, "max_position_embeddings": 64, "type_vocab_size": 2,
        "vocab_size": len(BERT_VOCAB), "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "pad_token_id": 0, "id2label": {"0": "negative", "1": "neutral", "2": "positive"},
        "label2id": {"negative": 0, "neutral": 1, "positive": 2}}


def bert_weights(config, g):
    h, inner, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    labels = len(config["id2label"])
    p = "bert."
    w = {p + "embeddings.word_embeddings.weight": rand(g, v, h, std=1.0),
         p + "embeddings.position_embeddings.weight": rand(g, config["max_position_embeddings"], h),
         p + "embeddings.token_type_embeddings.weight": rand(g, 2, h),
         p + "embeddings.LayerNorm.weight": 1 + rand(g, h, std=0.1),
         p + "embeddings.LayerNorm.bias": rand(g, h, std=0.1)}
    for l in range(config["num_hidden_layers"]):
        q = f"{p}encoder.layer.{l}."
        for name, (o, i) in {"attention.self.query": (h, h), "attention.self.key": (h, h),
                             "attention.self.value": (h, h), "attention.output.dense": (h, h),
                             "intermediate.dense": (inner, h), "output.dense": (h, inner)}.items():
            w[q + name + ".weight"] = rand(g, o, i)
            w[q + name + ".bias"] = rand(g, o, std=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[q + name + ".weight"] = 1 + rand(g, h, std=0.1)
            w[q + name + ".bias"] = rand(g, h, std=0.1)
    w[p + "pooler.dense.weight"] = rand(g, h, h, std=0.5)
    w[p + "pooler.dense.bias"] = rand(g, h, std=0.1)
    w["classifier.weight"] = rand(g, labels, h, std=0.5)
    w["classifier.bias"] = rand(g, labels, std=0.1)
    return w


def bert_forward(config, w, ids, types):
    """(last hidden state [T, h], logits [labels]) of BertForSequenceClassification."""
    eps, heads, p = config["layer_norm_eps"], config["num_attention_heads"], "bert."
    lin = lambda name, x: x @ w[name + ".weight"].T + w[name + ".bias"]  # noqa: E731
    ln = lambda name, x: layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)  # noqa: E731
    T = len(ids)
    x = (w[p + "embeddings.word_embeddings.weight"][torch.tensor(ids)] +
         w[p + "embeddings.position_embeddings.weight"][:T] +
         w[p + "embeddings.token_type_embeddings.weight"][torch.tensor(types)])
    x = ln(p + "embeddings.LayerNorm", x)
    for l in range(config["num_hidden_layers"]):
        q = f"{p}encoder.layer.{l}."
        a = attention(lin(q + "attention.self.query", x), lin(q + "attention.self.key", x),
                      lin(q + "attention.self.value", x), heads, causal=False)
        x = ln(q + "attention.output.LayerNorm", lin(q + "attention.output.dense", a) + x)
        m = torch.nn.functional.gelu(lin(q + "intermediate.dense", x))
        x = ln(q + "output.LayerNorm", lin(q + "output.dense", m) + x)
    pooled = torch.tanh(lin(p + "pooler.dense", x[0]))
    return x, lin("classifier", pooled)


# ---- GPT-2 --------------------------------------------------------------------------------

GPT2 = {"architectures": ["GPT2ForSequenceClassification"], "model_type": "gpt2",
        "vocab_size": 50, "n_embd": 16, "n_layer": 2, "n_head": 4, "n_positions": 64,
        "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "pad_token_id": 0,
        "id2label": {"0": "de", "1": "en", "2": "fr", "3": "nl"}}


def gpt2_weights(config, g):
    c, v, labels = config["n_embd"], config["vocab_size"], len(config["id2label"])
    w = {"transformer.wte.weight": rand(g, v, c, std=1.0),
         "transformer.wpe.weight": rand(g, config["n_positions"], c),
         "transformer.ln_f.weight": 1 + rand(g, c, std=0.1),
         "transformer.ln_f.bias": rand(g, c, std=0.1),
         "score.weight": rand(g, labels, c, std=0.5)}
    for l in range(config["n_layer"]):
        p = f"transformer.h.{l}."
        for name in ("ln_1", "ln_2"):
            w[p + name + ".weight"] = 1 + rand(g, c, std=0.1)
            w[p + name + ".bias"] = rand(g, c, std=0.1)
        for name, (i, o) in {"attn.c_attn": (c, 3 * c), "attn.c_proj": (c, c),
                             "mlp.c_fc": (c, 4 * c), "mlp.c_proj": (4 * c, c)}.items():
            w[p + name + ".weight"] = rand(g, i, o)  # Conv1D: [in, out]
            w[p + name + ".bias"] = rand(g, o, std=0.1)
    return w


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_forward(config, w, ids):
    """(final hidden state after ln_f [T, c], logits [labels] at the last token)."""
    eps, heads, c = config["layer_norm_epsilon"], config["n_head"], config["n_embd"]
    conv = lambda name, x: x @ w[name + ".weight"] + w[name + ".bias"]  # noqa: E731
    ln = lambda name, x: layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)  # noqa: E731
    T = len(ids)
    x = w["transformer.wte.weight"][torch.tensor(ids)] + w["transformer.wpe.weight"][:T]
    for l in range(config["n_layer"]):
        p = f"transformer.h.{l}."
        qkv = conv(p + "attn.c_attn", ln(p + "ln_1", x))
        a = attention(qkv[:, :c], qkv[:, c:2 * c], qkv[:, 2 * c:], heads, causal=True)
        x = x + conv(p + "attn.c_proj", a)
        x = x + conv(p + "mlp.c_proj", gelu_new(conv(p + "mlp.c_fc", ln(p + "ln_2", x))))
    x = ln("transformer.ln_f", x)
    return x, x[-1] @ w["score.weight"].T


# ---- cases --------------------------------------------------------------------------------

def pooled(hidden):
    out = {"cls": hidden[0], "mean": hidden.mean(0), "last": hidden[-1]}
    for name in list(out):
        out[name + "_normalized"] = torch.nn.functional.normalize(out[name], dim=0)
    return {k: v.tolist() for k, v in out.items()}


def write_folder(folder, config, weights, vocab=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(folder / "model.safetensors", weights)
    if vocab:
        (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab))


# ---- the classify objective's trainer --------------------------------------------------------

TRAIN = {"steps": 100, "batch_size": 4, "lr": 5e-4, "betas": (0.9, 0.999), "eps": 1e-8,
         "weight_decay": 0.01, "warmup_steps": 10, "max_grad_norm": 1.0}


def synthetic_task(g, count=40):
    """Sentences of 2-8 words; "not" makes one negative, else "good" positive, else neutral."""
    records = []
    for _ in range(count):
        n = int(torch.randint(2, 9, (1,), generator=g))
        words = [WORDS[int(i)] for i in torch.randint(0, len(WORDS), (n,), generator=g)]
        label = "negative" if "not" in words else "positive" if "good" in words else "neutral"
        records.append((" ".join(words), label))
    return records


def write_training(out, initial, g):
    out.mkdir(parents=True, exist_ok=True)
    records = synthetic_task(g)
    (out / "train.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in records))
    labels = [BERT["id2label"][str(i)] for i in range(len(BERT["id2label"]))]
    examples = [([2] + [BERT_VOCAB.index(w) for w in t.split()] + [3], labels.index(l))
                for t, l in records]
    w = {k: torch.nn.Parameter(v.clone()) for k, v in initial.items()}
    decay = [p for k, p in w.items() if p.dim() >= 2]
    rest = [p for k, p in w.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": TRAIN["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=TRAIN["lr"], betas=TRAIN["betas"], eps=TRAIN["eps"])
    steps, warm = TRAIN["steps"], TRAIN["warmup_steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / max(1, warm) if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))
    n, per_epoch = TRAIN["batch_size"], len(examples) // TRAIN["batch_size"]
    with open(out / "losses.jsonl", "w") as log:
        for step in range(steps):
            opt.zero_grad(set_to_none=False)
            batch = examples[(step % per_epoch) * n:(step % per_epoch + 1) * n]
            logits = torch.stack([bert_forward(BERT, w, ids, [0] * len(ids))[1] for ids, _ in batch])
            loss = torch.nn.functional.cross_entropy(logits, torch.tensor([y for _, y in batch]))
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(list(w.values()), TRAIN["max_grad_norm"])
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            log.write(json.dumps({"step": step + 1, "loss": loss.item(), "lr": lr,
                                  "grad_norm": float(norm)}) + "\n")
    with torch.no_grad():
        final = [bert_forward(BERT, w, ids, [0] * len(ids))[1].tolist() for ids, _ in examples]
    (out / "final.json").write_text(json.dumps({"logits": final, "settings": TRAIN}) + "\n")


def main():
    out = Path(sys.argv[1])
    g = torch.Generator().manual_seed(2025)
    bw = bert_weights(BERT, g)
    write_folder(out / "bert-cls", BERT, bw, BERT_VOCAB)
    multi = dict(BERT, problem_type="multi_label_classification")
    write_folder(out / "bert-multilabel", multi, bw, BERT_VOCAB)
    gw = gpt2_weights(GPT2, g)
    write_folder(out / "gpt2-cls", GPT2, gw)

    reference = {"bert": [], "bert_pairs": [], "gpt2": []}
    # Records of different lengths, run as one batch: ids with token types (one a pair).
    for length in (3, 7, 1, 12, 5, 9):
        ids = [2] + torch.randint(5, len(BERT_VOCAB), (max(length - 2, 0),), generator=g).tolist()
        ids = (ids + [3])[:length] if length > 1 else [2]
        types = [0] * len(ids)
        if length == 9:  # the second segment, as a pair would have it
            types = [0] * 5 + [1] * 4
        hidden, logits = bert_forward(BERT, bw, ids, types)
        reference["bert"].append({"ids": ids, "token_type_ids": types,
                                  "logits": logits.tolist(), "pooled": pooled(hidden)})
    # Sentence pairs through the WordPiece tokenizer: [CLS] a [SEP] b [SEP], types 0.. 1..
    for first, second in (("the cat sat", "on a mat"), ("it was very good", "not good"),
                          ("red", "a big blue house and a small red house")):
        a = [BERT_VOCAB.index(t) for t in first.split()]
        b = [BERT_VOCAB.index(t) for t in second.split()]
        ids = [2] + a + [3] + b + [3]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        hidden, logits = bert_forward(BERT, bw, ids, types)
        reference["bert_pairs"].append({"text": first, "pair": second, "ids": ids,
                                        "logits": logits.tolist(), "pooled": pooled(hidden)})
    for length in (4, 1, 10, 6, 13, 2):
        ids = torch.randint(1, GPT2["vocab_size"], (length,), generator=g).tolist()
        hidden, logits = gpt2_forward(GPT2, gw, ids)
        reference["gpt2"].append({"ids": ids, "logits": logits.tolist(), "pooled": pooled(hidden)})
    (out / "reference.json").write_text(json.dumps(reference) + "\n")
    write_training(out / "train", bw, g)


if __name__ == "__main__":
    main()
