#!/usr/bin/python3
"""Float64 plain-torch reference of the `rnn-seq2seq` model plugin, and its test fixtures.

Written from plugins/models/rnn-seq2seq/README.md: a bidirectional nn.LSTM / nn.GRU encoder, a
dense bridge from the top layer's final forward and backward states to the decoder's initial
hidden state, an input-feeding nn.LSTM / nn.GRU decoder with Bahdanau (additive) or Luong
(general) attention, an attentional layer tanh(W_c [c; s]) and a generator.

    reference_rnn.py OUT_DIR      writes OUT_DIR/<fixture>/{config.json, model.safetensors,
                                  source_vocab.txt, target_vocab.txt, expected.json,
                                  grads.safetensors, train.tsv}
    reference_rnn.py --trajectory FIXTURE STEPS OUT.jsonl
                                  trains fixture FIXTURE's model in float32 as `masque train`
                                  does (TRAJECTORY below) and writes each step's loss, lr,
                                  gradient norm and token count

Everything is deterministic (fixed seeds). The weights are drawn in float64, rounded to float32
(what the checkpoint stores) and the reference runs in float64 on those rounded weights. Each
record is run alone: the reference never pads.
"""
import json
import math
import os
import struct
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

PAD, START, EOS, UNK = 0, 1, 2, 3
MAX_STEPS = 12
BEAM = 4


class Seq2Seq(nn.Module):
    """The README's model; its state_dict() names are the checkpoint's tensor names."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        rnn = nn.LSTM if c["cell"] == "lstm" else nn.GRU
        emb, he, hd = c["embedding_size"], c["encoder_hidden_size"], c["decoder_hidden_size"]
        self.encoder = nn.Module()
        self.encoder.embed_tokens = nn.Embedding(c["source_vocab_size"], emb)
        self.encoder.rnn = rnn(emb, he, c["encoder_layers"], bidirectional=True, batch_first=True)
        if c["bridge"] == "dense":
            self.bridge = nn.Linear(2 * he, c["decoder_layers"] * hd)
        self.decoder = nn.Module()
        self.decoder.embed_tokens = nn.Embedding(c["target_vocab_size"], emb)
        feed = hd if c["input_feeding"] else 0
        self.decoder.rnn = rnn(emb + feed, hd, c["decoder_layers"], batch_first=True)
        att = nn.Module()
        if c["attention"] == "bahdanau":
            a = c["attention_size"]
            att.query_proj = nn.Linear(hd, a, bias=True)
            att.key_proj = nn.Linear(2 * he, a, bias=False)
            att.v = nn.Linear(a, 1, bias=False)
        else:
            att.key_proj = nn.Linear(2 * he, hd, bias=False)
        att.out_proj = nn.Linear(2 * he + hd, hd, bias=c["attention_output_bias"])
        self.decoder.attention = att
        if not c["tie_output_projection"]:
            self.generator = nn.Linear(hd, c["target_vocab_size"], bias=c["output_bias"])

    # ---- encoder -------------------------------------------------------------------------
    def encode(self, source):
        """memory [T, 2He] and the decoder's initial state, for one unpadded source."""
        c = self.c
        x = self.encoder.embed_tokens(torch.tensor([source]))
        memory, final = self.encoder.rnn(x)
        h_n = final[0] if c["cell"] == "lstm" else final
        top = torch.cat([h_n[-2, 0], h_n[-1, 0]])  # forward after the last token, backward after the first
        layers, hd = c["decoder_layers"], c["decoder_hidden_size"]
        if c["bridge"] == "dense":
            h0 = torch.tanh(self.bridge(top)).view(layers, 1, hd)
        else:
            h0 = torch.zeros(layers, 1, hd, dtype=self.decoder.embed_tokens.weight.dtype)
        state = (h0, torch.zeros_like(h0)) if c["cell"] == "lstm" else h0
        feed = torch.zeros(hd, dtype=self.decoder.embed_tokens.weight.dtype)
        return memory[0], state, feed

    # ---- one decoder step ----------------------------------------------------------------
    def step(self, memory, state, feed, token):
        c = self.c
        e = self.decoder.embed_tokens(torch.tensor([token]))[0]
        x = torch.cat([e, feed]) if c["input_feeding"] else e
        out, state = self.decoder.rnn(x.view(1, 1, -1), state)
        s = out[0, 0]
        att = self.decoder.attention
        if c["attention"] == "bahdanau":
            scores = att.v(torch.tanh(att.query_proj(s) + att.key_proj(memory))).view(-1)
        else:
            scores = att.key_proj(memory) @ s
        alpha = torch.softmax(scores, dim=0)
        context = alpha @ memory
        a = torch.tanh(att.out_proj(torch.cat([context, s])))
        weight = (self.decoder.embed_tokens.weight if c["tie_output_projection"] else
                  self.generator.weight)
        logits = a @ weight.t()
        if not c["tie_output_projection"] and c["output_bias"]:
            logits = logits + self.generator.bias
        return torch.log_softmax(logits, dim=0), state, a


def clone_state(state):
    return tuple(s.clone() for s in state) if isinstance(state, tuple) else state.clone()


@torch.no_grad()
def teacher_forced(model, source, target):
    memory, state, feed = model.encode(source)
    out = []
    for prev, tok in zip([START] + target, target + [EOS]):
        logp, state, a = model.step(memory, state, feed, prev)
        feed = a
        out.append(logp[tok].item())
    return out


@torch.no_grad()
def greedy(model, source):
    memory, state, feed = model.encode(source)
    tokens, logprobs, prev = [], [], START
    for _ in range(MAX_STEPS):
        logp, state, feed = model.step(memory, state, feed, prev)
        top = torch.topk(logp, 2)
        prev = int(top.indices[0])
        logprobs.append(logp[prev].item())
        if prev == EOS:
            break
        tokens.append(prev)
    return tokens, logprobs


@torch.no_grad()
def beam(model, source):
    """The tests' beam search (tests/rnn/rnn_support.cpp does the same through select()): the K
    best of all beams x vocabulary extensions by summed log-prob (ties: lower beam, lower id);
    an extension by </s> is finished, the others live on; stops when no beam lives, K are
    finished or after MAX_STEPS; the best finished or live hypothesis wins."""
    memory, state, feed = model.encode(source)
    beams = [([], 0.0, state, feed)]
    finished = []
    for _ in range(MAX_STEPS):
        cands = []
        for b, (toks, score, st, fd) in enumerate(beams):
            logp, st2, a = model.step(memory, clone_state(st), fd, toks[-1] if toks else START)
            beams[b] = (toks, score, st2, a)
            for v in range(logp.numel()):
                cands.append((score + logp[v].item(), b, v))
        cands.sort(key=lambda t: (-t[0], t[1], t[2]))
        live = []
        for score, b, v in cands[:BEAM]:
            toks, _, st, fd = beams[b]
            if v == EOS:
                finished.append((toks, score))
            else:
                live.append((toks + [v], score, clone_state(st), fd))
        beams = live
        if not beams or len(finished) >= BEAM:
            break
    pool = finished + [(t, s) for t, s, _, _ in beams]
    best = max(pool, key=lambda t: t[1])  # max keeps the first of equal scores
    return best[0], best[1]


def batch_loss(model, records):
    """The trainer's loss of one batch (objective seq2seq, teacher forcing): the negative
    log-likelihood of every target token and of the final </s>, summed over the records and
    divided by their number. Each record runs alone: the reference never pads."""
    total, count = 0.0, 0
    for source, target in records:
        memory, state, feed = model.encode(source)
        for prev, tok in zip([START] + target, target + [EOS]):
            logp, state, feed = model.step(memory, state, feed, prev)
            total = total - logp[tok]
            count += 1
    return total / count


def write_gradients(folder, model):
    """grads.safetensors: d(batch_loss over all SOURCES/TARGETS)/d(parameter) under the
    checkpoint's names (a tied generator's gradient is in decoder.embed_tokens.weight)."""
    model.zero_grad()
    loss = batch_loss(model, list(zip(SOURCES, TARGETS)))
    loss.backward()
    write_safetensors(os.path.join(folder, "grads.safetensors"),
                      {name: p.grad for name, p in model.named_parameters()})
    return loss.item()


# ---- fixtures ----------------------------------------------------------------------------
FIXTURES = {
    # name: cell, attention, and one variation each so every option is exercised
    "lstm-bahdanau": dict(cell="lstm", attention="bahdanau"),
    "lstm-luong": dict(cell="lstm", attention="luong", tie_output_projection=True,
                       embedding_size=20, attention_output_bias=True),
    "gru-bahdanau": dict(cell="gru", attention="bahdanau", bridge="zeros", decoder_layers=1,
                         output_bias=False),
    "gru-luong": dict(cell="gru", attention="luong", input_feeding=False, encoder_layers=3),
}

# Wide enough that the recurrent products and most projections pass libmasque's int8 rule (>= 128
# inputs, 64 outputs and 32,768 weights): rnn_int8_test runs them with matmul_dtype=int8.
WIDE = dict(embedding_size=128, encoder_hidden_size=128, decoder_hidden_size=128,
            attention_size=128)
WIDE_FIXTURES = {
    "lstm-wide": dict(cell="lstm", attention="bahdanau", **WIDE),
    "gru-wide": dict(cell="gru", attention="luong", **WIDE),
}

SOURCES = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13, 14, 15, 16], [17, 4, 18, 5, 19],
           [10, 10, 10, 10, 10, 10, 10], [19, 18], [6, 12, 7, 15, 4, 9, 11, 13, 5, 14, 8]]
TARGETS = [[4, 5], [6], [7, 8, 9, 10, 11, 12], [13, 14, 15], [16, 17, 18, 19, 20, 21, 22, 23],
           [5, 5], [9, 8, 7, 6, 5, 4, 10, 11, 12]]


def config_of(name, variation):
    c = {
        "architecture": "rnn-seq2seq",
        "cell": "lstm",
        "source_vocab_size": 20,
        "target_vocab_size": 24,
        "embedding_size": 16,
        "encoder_layers": 2,
        "encoder_hidden_size": 12,
        "bridge": "dense",
        "decoder_layers": 2,
        "decoder_hidden_size": 20,
        "attention": "bahdanau",
        "attention_size": 14,
        "attention_output_bias": False,
        "input_feeding": True,
        "tie_output_projection": False,
        "output_bias": True,
        "decoder_start_token_id": START,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
    }
    c.update(variation)
    return c




def make_model(c, seed):
    torch.manual_seed(seed)
    model = Seq2Seq(c).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Larger than torch's default init so that attention and the argmax matter.
            if "embed_tokens" in name:
                scale = 1.0
            elif "bias" in name:
                scale = 0.1
            else:
                scale = (3.0 if "generator" in name else 1.5) / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, dtype=torch.float64) * scale)
            p.copy_(p.to(torch.float32).to(torch.float64))  # what the checkpoint holds
    return model


def write_fixture(root, name, variation, seed):
    c = config_of(name, variation)
    model = make_model(c, seed)
    folder = os.path.join(root, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    write_safetensors(os.path.join(folder, "model.safetensors"), model.state_dict())
    names = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0-3 of both vocabularies
    for side, letter in (("source", "s"), ("target", "t")):
        with open(os.path.join(folder, f"{side}_vocab.txt"), "w") as f:
            f.write("".join((names[i] if i < 4 else f"{letter}{i}") + "\n"
                            for i in range(c[f"{side}_vocab_size"])))
    records = []
    for source, target in zip(SOURCES, TARGETS):
        g_tokens, g_logprobs = greedy(model, source)
        b_tokens, b_score = beam(model, source)
        records.append({
            "source": source,
            "target": target,
            "teacher_forced": teacher_forced(model, source, target),
            "greedy": g_tokens,
            "greedy_logprobs": g_logprobs,
            "beam": b_tokens,
            "beam_score": b_score,
        })
    with open(os.path.join(folder, "train.tsv"), "w") as f:
        for source, target in zip(SOURCES, TARGETS):
            f.write(" ".join(f"s{i}" for i in source) + "\t" + " ".join(f"t{i}" for i in target)
                    + "\n")
    loss = write_gradients(folder, model)
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"max_steps": MAX_STEPS, "beam_size": BEAM, "batch_loss": loss,
                   "records": records}, f, indent=1)


# ---- the reference trainer -----------------------------------------------------------------
# What tests/rnn/rnn_trajectory_test.cpp runs `masque train` with: the fixture's records in file
# order (shuffle false), batches of BATCH, AdamW (torch's, weight decay on every parameter of
# two or more dimensions), Hugging Face's linear schedule with warmup, clipping of the global
# gradient norm (torch.nn.utils.clip_grad_norm_).
TRAJECTORY = dict(batch=2, lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, warmup=10,
                  max_grad_norm=1.0)


def trajectory(name, steps, out_file):
    t = TRAJECTORY
    names = sorted(FIXTURES)
    c = config_of(name, FIXTURES[name])
    model = make_model(c, 1234 + names.index(name)).float()
    named = dict(model.named_parameters())
    decays = [p for n, p in named.items() if p.dim() >= 2 and not n.endswith("bias")]
    others = [p for n, p in named.items() if not (p.dim() >= 2 and not n.endswith("bias"))]
    opt = torch.optim.AdamW([{"params": decays, "weight_decay": t["weight_decay"]},
                             {"params": others, "weight_decay": 0.0}],
                            lr=t["lr"], betas=t["betas"], eps=t["eps"])

    def factor(s):
        if s < t["warmup"]:
            return s / max(1, t["warmup"])
        return max(0.0, (steps - s) / max(1, steps - t["warmup"]))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    records = list(zip(SOURCES, TARGETS))
    per_epoch = math.ceil(len(records) / t["batch"])
    with open(out_file, "w") as out:
        for step in range(steps):
            b = step % per_epoch
            batch = records[b * t["batch"]:(b + 1) * t["batch"]]
            opt.zero_grad(set_to_none=False)
            loss = batch_loss(model, batch)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(list(named.values()), t["max_grad_norm"])
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            out.write(json.dumps({"step": step + 1, "loss": loss.item(), "lr": lr,
                                  "grad_norm": float(norm),
                                  "tokens": sum(len(tg) + 1 for _, tg in batch)}) + "\n")


def main():
    torch.set_num_threads(1)
    if sys.argv[1] == "--trajectory":
        trajectory(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    root = sys.argv[1]
    for i, (name, variation) in enumerate(sorted(FIXTURES.items())):
        write_fixture(root, name, variation, 1234 + i)
    for i, (name, variation) in enumerate(sorted(WIDE_FIXTURES.items())):
        write_fixture(root, name, variation, 2234 + i)


if __name__ == "__main__":
    main()
