#!/usr/bin/python3
"""PyTorch reference of masque's `encoder-decoder` model plugin, for benchmarks and checks.

Runs a Transformer encoder-decoder described by a config.json (the keys documented in
plugins/models/encoder-decoder/README.md, with the same defaults) and a model.safetensors with
Hugging Face BART-style tensor names, e.g. ../shared/models/aren-transliteration. The
safetensors file is parsed here with numpy; the network runs on torch ops in float32, batched
with padding, with per-layer self-attention KV caches and cross-attention keys/values computed
once per batch. Decoding follows CTranslate2's translate_batch as the model's README describes
it: greedy (beam size 1) or beam search (2K candidates, finished hypotheses replaced by
secondary candidates, patience, length penalty), min_decoding_length 1, max_decoding_length 256.

Input: one source per line, tokens separated by spaces (unknown tokens map to the source
<unk>). Output: one line per input in input order, the best hypothesis' tokens separated by
spaces (with --with-score: "score ||| tokens"). Like CTranslate2's translate_file, batches are
formed from chunks of 16 x batch-size lines sorted by source length.

Usage (Debian's /usr/bin/python3 has torch and numpy; the `python3` on PATH may not):

    /usr/bin/python3 bench/encdec/reference_torch.py --beam-size 4 --batch-size 32 \\
        ../shared/bench/aren-20k.txt /tmp/out.txt
    /usr/bin/python3 bench/encdec/reference_torch.py --check-examples

--check-examples verifies the model's examples.jsonl (teacher-forced per-token log-probs and
greedy outputs and scores within 1e-5) and exits non-zero on any mismatch.
"""

import argparse
import json
import math
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = (REPO / ".." / "shared" / "models" / "aren-transliteration").resolve()


# ---- checkpoint -------------------------------------------------------------------------------


def read_safetensors(path):
    """name -> float32 torch tensor, parsed with numpy (8-byte LE header size, JSON header)."""
    data = Path(path).read_bytes()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_size])
    base = 8 + header_size
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        dtype = entry["dtype"]
        if dtype == "F32":
            array = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            array = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dtype == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: tensor '{name}': unsupported dtype {dtype}")
        tensors[name] = torch.from_numpy(array.copy().reshape(entry["shape"]))
    return tensors


def read_vocab(path):
    """One token per line, split on '\\n' only (some tokens are invisible format characters)."""
    text = Path(path).read_text(encoding="utf-8")
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return tokens


class Config:
    """The config.json keys of the plugin's README, with its defaults."""

    def __init__(self, path):
        c = json.loads(Path(path).read_text())
        self.path = path

        def need(key):
            if c.get(key) is None:
                raise ValueError(f"{path}: key '{key}': missing")
            return c[key]

        def one_of(key, default, choices):
            value = c.get(key, default)
            if value not in choices:
                raise ValueError(f"{path}: key '{key}': unsupported value '{value}'")
            return value

        one_of("architecture", "transformer-encoder-decoder", ["transformer-encoder-decoder"])
        one_of("normalization", "layernorm", ["layernorm"])
        self.encoder_layers = need("num_encoder_layers")
        self.decoder_layers = need("num_decoder_layers")
        self.d_model = need("d_model")
        self.heads = need("num_heads")
        self.head_dim = c.get("head_dim", self.d_model // self.heads)
        self.ffn_dim = need("ffn_dim")
        self.source_vocab = need("source_vocab_size")
        self.target_vocab = need("target_vocab_size")
        self.activation = one_of("activation", None,
                                 ["relu", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast",
                                  "silu", "swish"])
        self.pre_norm = need("pre_norm")
        self.encoder_final_norm = c.get("encoder_final_layer_norm", self.pre_norm)
        self.decoder_final_norm = c.get("decoder_final_layer_norm", self.pre_norm)
        self.eps = c.get("layer_norm_eps", 1e-5)
        self.attention_scale = c.get("attention_scale", 1.0 / math.sqrt(self.head_dim))
        self.attention_bias = c.get("attention_bias", True)
        self.ffn_bias = c.get("ffn_bias", True)
        self.output_bias = c.get("output_projection_bias", False)
        self.embedding_scale = c.get("embedding_scale", math.sqrt(self.d_model))
        self.shared_embeddings = c.get("shared_embeddings", False)
        self.tie_output = c.get("tie_output_projection", False)
        self.positions = one_of("position_encoding", None, ["sinusoidal", "learned"])
        self.max_positions = c.get("max_position_embeddings", 1024)
        self.layout = one_of("position_encoding_layout", "concat_sin_cos",
                             ["concat_sin_cos", "interleaved"])
        self.first_position = c.get("position_encoding_first_position", 0)
        self.max_timescale = c.get("position_encoding_max_timescale", 10000.0)
        self.denominator = one_of("position_encoding_timescale_denominator", "half_minus_one",
                                  ["half_minus_one", "half"])
        self.position_offset = c.get("position_encoding_offset", 0)
        self.decoder_start = need("decoder_start_token_id")
        eos = need("eos_token_id")
        self.eos = eos[0] if isinstance(eos, list) else eos
        self.pad = need("pad_token_id")
        self.source_unk = c.get("source_unk_token_id")


def sinusoid(cfg):
    """[max_positions, d_model] in float32 steps as CTranslate2 computes it."""
    half = cfg.d_model // 2
    denominator = np.float32(half - 1 if cfg.denominator == "half_minus_one" else half)
    inc = np.float32(np.log(np.float32(cfg.max_timescale))) / denominator
    inv = np.exp((-inc * np.arange(half, dtype=np.float32)).astype(np.float64)).astype(np.float32)
    p = (np.arange(cfg.max_positions) + cfg.first_position).astype(np.float32)
    angle = (p[:, None] * inv[None, :]).astype(np.float64)  # the float product
    sin, cos = np.sin(angle).astype(np.float32), np.cos(angle).astype(np.float32)
    if cfg.layout == "concat_sin_cos":
        table = np.concatenate([sin, cos], axis=1)
    else:
        table = np.stack([sin, cos], axis=2).reshape(cfg.max_positions, 2 * half)
    return torch.from_numpy(table)


# ---- network ----------------------------------------------------------------------------------


ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "swish": F.silu,
}


class Model:
    def __init__(self, folder):
        folder = Path(folder)
        self.cfg = cfg = Config(folder / "config.json")
        self.w = read_safetensors(folder / "model.safetensors")
        self.act = ACTIVATIONS[cfg.activation]
        d = cfg.d_model
        if cfg.shared_embeddings:
            name = next((n for n in ("shared.weight", "decoder.embed_tokens.weight",
                                     "encoder.embed_tokens.weight") if n in self.w),
                        "shared.weight")
            target_raw = source_raw = self.tensor(name, (cfg.target_vocab, d))
        else:
            source_raw = self.tensor("encoder.embed_tokens.weight", (cfg.source_vocab, d))
            target_raw = self.tensor("decoder.embed_tokens.weight", (cfg.target_vocab, d))
        self.source_embeddings = source_raw * np.float32(cfg.embedding_scale)
        self.target_embeddings = target_raw * np.float32(cfg.embedding_scale)
        if cfg.positions == "sinusoidal":
            self.source_positions = self.target_positions = sinusoid(cfg)
        else:
            rows = (cfg.max_positions + cfg.position_offset, d)
            off = cfg.position_offset
            self.source_positions = self.tensor("encoder.embed_positions.weight", rows)[off:]
            self.target_positions = self.tensor("decoder.embed_positions.weight", rows)[off:]
        self.output_weight = target_raw if cfg.tie_output else self.tensor(
            "lm_head.weight", (cfg.target_vocab, d))
        self.output_bias = None
        if cfg.output_bias:
            self.output_bias = (self.w["final_logits_bias"].reshape(-1)
                                if "lm_head.bias" not in self.w and "final_logits_bias" in self.w
                                else self.tensor("lm_head.bias", (cfg.target_vocab,)))

    def tensor(self, name, shape):
        if name not in self.w:
            raise ValueError(f"model.safetensors: no tensor '{name}'")
        t = self.w[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"model.safetensors: tensor '{name}' has shape {list(t.shape)}, "
                             f"expected {list(shape)}")
        return t

    # -- building blocks --

    def linear(self, x, prefix, bias):
        return F.linear(x, self.w[prefix + ".weight"], self.w[prefix + ".bias"] if bias else None)

    def norm(self, x, prefix):
        return F.layer_norm(x, (self.cfg.d_model,), self.w[prefix + ".weight"],
                            self.w[prefix + ".bias"], self.cfg.eps)

    def heads(self, x):  # [N, T, H*d] -> [N, H, T, d]
        n, t, _ = x.shape
        return x.view(n, t, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)

    def attend(self, q, k, v, key_mask=None):
        """q [N, H, Tq, d], k/v [N, H, Tk, d], key_mask [N, Tk] (True = visible) -> [N, Tq, H*d]."""
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.cfg.attention_scale
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if key_mask is not None:  # a row with no visible key gets zeros, not NaN
            probs = torch.nan_to_num(probs, nan=0.0)
        out = torch.matmul(probs, v)
        n, _, t, _ = out.shape
        return out.transpose(1, 2).reshape(n, t, -1)

    def block(self, x, prefix, sublayer):
        """Pre-norm x + f(LN(x)) or post-norm LN(x + f(x))."""
        if self.cfg.pre_norm:
            return x + sublayer(self.norm(x, prefix))
        return self.norm(x + sublayer(x), prefix)

    def ffn(self, h, prefix):
        b = self.cfg.ffn_bias
        return self.linear(self.act(self.linear(h, prefix + ".fc1", b)), prefix + ".fc2", b)

    # -- encoder --

    def encode(self, ids, mask):
        """ids [N, S] (right-padded), mask [N, S] True for real tokens -> memory [N, S, d]."""
        n, s = ids.shape
        x = self.source_embeddings[ids] + self.source_positions[:s][None]
        b = self.cfg.attention_bias
        for l in range(self.cfg.encoder_layers):
            p = f"encoder.layers.{l}"

            def self_attention(h, p=p):
                q = self.heads(self.linear(h, p + ".self_attn.q_proj", b))
                k = self.heads(self.linear(h, p + ".self_attn.k_proj", b))
                v = self.heads(self.linear(h, p + ".self_attn.v_proj", b))
                return self.linear(self.attend(q, k, v, mask), p + ".self_attn.out_proj", b)

            x = self.block(x, p + ".self_attn_layer_norm", self_attention)
            x = self.block(x, p + ".final_layer_norm", lambda h, p=p: self.ffn(h, p))
        if self.cfg.encoder_final_norm:
            x = self.norm(x, "encoder.layer_norm")
        return x

    # -- decoder --

    def start(self, ids, mask):
        """The decoding state of a source batch: cross k/v of every layer, empty self caches."""
        memory = self.encode(ids, mask)
        b = self.cfg.attention_bias
        cross = []
        for l in range(self.cfg.decoder_layers):
            p = f"decoder.layers.{l}.encoder_attn"
            cross.append((self.heads(self.linear(memory, p + ".k_proj", b)),
                          self.heads(self.linear(memory, p + ".v_proj", b))))
        return {"mask": mask, "cross": cross, "self": [None] * self.cfg.decoder_layers, "step": 0}

    def step(self, state, tokens):
        """tokens [N] at position state['step'] -> logits [N, target vocab]; updates the state."""
        b = self.cfg.attention_bias
        x = (self.target_embeddings[tokens] + self.target_positions[state["step"]])[:, None, :]
        for l in range(self.cfg.decoder_layers):
            p = f"decoder.layers.{l}"

            def self_attention(h, l=l, p=p):
                q = self.heads(self.linear(h, p + ".self_attn.q_proj", b))
                k = self.heads(self.linear(h, p + ".self_attn.k_proj", b))
                v = self.heads(self.linear(h, p + ".self_attn.v_proj", b))
                if state["self"][l] is not None:
                    k = torch.cat([state["self"][l][0], k], dim=2)
                    v = torch.cat([state["self"][l][1], v], dim=2)
                state["self"][l] = (k, v)
                return self.linear(self.attend(q, k, v), p + ".self_attn.out_proj", b)

            def cross_attention(h, l=l, p=p):
                q = self.heads(self.linear(h, p + ".encoder_attn.q_proj", b))
                k, v = state["cross"][l]
                return self.linear(self.attend(q, k, v, state["mask"]),
                                   p + ".encoder_attn.out_proj", b)

            x = self.block(x, p + ".self_attn_layer_norm", self_attention)
            x = self.block(x, p + ".encoder_attn_layer_norm", cross_attention)
            x = self.block(x, p + ".final_layer_norm", lambda h, p=p: self.ffn(h, p))
        if self.cfg.decoder_final_norm:
            x = self.norm(x, "decoder.layer_norm")
        state["step"] += 1
        return F.linear(x[:, 0], self.output_weight, self.output_bias)

    @staticmethod
    def select(state, index):
        """Row i of the new state is row index[i] (beam reorder, replicate, drop)."""
        pick = lambda t: t.index_select(0, index)
        state["mask"] = pick(state["mask"])
        state["cross"] = [(pick(k), pick(v)) for k, v in state["cross"]]
        state["self"] = [None if kv is None else (pick(kv[0]), pick(kv[1]))
                         for kv in state["self"]]


# ---- decoding (CTranslate2's translate_batch) -------------------------------------------------


def token_log_probs(logits, step, min_length, eos):
    """log_softmax in float32, with </s> at the lowest float while step < min_length."""
    if step < min_length:
        logits = logits.clone()
        logits[:, eos] = torch.finfo(torch.float32).min
    return torch.log_softmax(logits, dim=-1)


def source_tensors(sources, pad):
    longest = max(len(s) for s in sources)
    ids = torch.full((len(sources), longest), pad, dtype=torch.long)
    mask = torch.zeros((len(sources), longest), dtype=torch.bool)
    for i, s in enumerate(sources):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = True
    return ids, mask


def greedy_search(model, sources, max_length=256, min_length=1):
    """-> per source (tokens, score, token log-probs); finished rows leave the batch."""
    cfg = model.cfg
    state = model.start(*source_tensors(sources, cfg.pad))
    n = len(sources)
    rows = list(range(n))  # the source of each live row
    tokens = torch.full((n,), cfg.decoder_start, dtype=torch.long)
    out = [([], []) for _ in range(n)]
    for step in range(max_length):
        log_probs = token_log_probs(model.step(state, tokens), step, min_length, cfg.eos)
        best = log_probs.argmax(dim=-1)
        keep = []
        for r, src in enumerate(rows):
            token = int(best[r])
            out[src][1].append(float(log_probs[r, token]))
            if token == cfg.eos:
                continue
            out[src][0].append(token)
            keep.append(r)
        if not keep or step + 1 == max_length:
            break
        if len(keep) < len(rows):
            index = torch.tensor(keep, dtype=torch.long)
            Model.select(state, index)
            best = best.index_select(0, index)
            rows = [rows[r] for r in keep]
        tokens = best
    results = []
    for toks, lps in out:
        length = len(lps)  # tokens, plus </s> when it was produced
        results.append((toks, sum(lps) / length if length else 0.0, lps))
    return results


def beam_search(model, sources, beam_size, length_penalty=1.0, patience=1.0, max_length=256,
                min_length=1, num_hypotheses=1):
    """CTranslate2's beam search (the model README's steps 1-5) -> per source (tokens, score)."""
    cfg = model.cfg
    k = beam_size
    state = model.start(*source_tensors(sources, cfg.pad))
    live = list(range(len(sources)))  # the source of each live batch item
    finished = [[] for _ in sources]  # (un-normalised score, tokens, ended by </s>)
    beams = [[[]] for _ in sources]  # per live item: the token lists of its beams
    cum = torch.zeros((len(sources), 1))  # [items, beams]: cumulative scores
    tokens = torch.full((len(sources),), cfg.decoder_start, dtype=torch.long)
    needed = round(k * patience)
    for step in range(max_length):
        last_step = step + 1 == max_length
        log_probs = token_log_probs(model.step(state, tokens), step, min_length, cfg.eos)
        items, width = cum.shape
        scores = (cum.reshape(-1, 1) + log_probs).reshape(items, width * cfg.target_vocab)
        top_scores, top_ids = scores.topk(2 * k, dim=-1)  # descending
        next_rows, next_tokens, next_cum, next_beams, next_live = [], [], [], [], []
        for i, src in enumerate(live):
            candidates = [(float(top_scores[i, j]), int(top_ids[i, j]) // cfg.target_vocab,
                           int(top_ids[i, j]) % cfg.target_vocab) for j in range(2 * k)]
            chosen = list(range(k))
            secondary = k
            top_finished = False
            for slot in range(k):
                score, beam, token = candidates[slot]
                if token == cfg.eos or last_step:
                    ended = token == cfg.eos
                    toks = beams[i][beam] + ([] if ended else [token])
                    finished[src].append((score, toks, ended))
                    top_finished = top_finished or slot == 0
                    for j in range(secondary, 2 * k):
                        if candidates[j][2] != cfg.eos:
                            chosen[slot] = j
                            secondary = j + 1
                            break
            if length_penalty == 0:
                done = top_finished and len(finished[src]) >= num_hypotheses
            else:
                done = len(finished[src]) >= needed
            if done or last_step:
                continue
            next_live.append(src)
            item_beams, item_cum = [], []
            for j in chosen:
                score, beam, token = candidates[j]
                next_rows.append(i * width + beam)
                next_tokens.append(token)
                item_beams.append(beams[i][beam] + [token])
                item_cum.append(score)
            next_beams.append(item_beams)
            next_cum.append(item_cum)
        if not next_live:
            break
        Model.select(state, torch.tensor(next_rows, dtype=torch.long))
        tokens = torch.tensor(next_tokens, dtype=torch.long)
        live, beams, cum = next_live, next_beams, torch.tensor(next_cum)
    results = []
    for hyps in finished:
        normalized = []
        for score, toks, ended in hyps:
            length = len(toks) + (1 if ended else 0)
            normalized.append((score / (length ** length_penalty) if length else 0.0, toks))
        normalized.sort(key=lambda h: -h[0])  # stable: ties keep their order
        best = normalized[:num_hypotheses][0]
        results.append((best[1], best[0]))
    return results


def translate(model, sources, beam_size):
    """Best (tokens, score) per source; empty sources give an empty hypothesis, score 0."""
    out = [([], 0.0)] * len(sources)
    todo = [i for i, s in enumerate(sources) if s]
    if not todo:
        return out
    batch = [sources[i] for i in todo]
    if beam_size == 1:
        decoded = [(t, s) for t, s, _ in greedy_search(model, batch)]
    else:
        decoded = beam_search(model, batch, beam_size)
    for i, result in zip(todo, decoded):
        out[i] = result
    return out


# ---- command line -----------------------------------------------------------------------------


def translate_file(args):
    model = Model(args.model)
    cfg = model.cfg
    source_vocab = read_vocab(Path(args.model) / "source_vocab.txt")
    target_vocab = read_vocab(Path(args.model) / "target_vocab.txt")
    ids = {t: i for i, t in enumerate(source_vocab)}
    unk = cfg.source_unk if cfg.source_unk is not None else len(source_vocab) - 1
    with open(args.input, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    sources = [[ids.get(t, unk) for t in line.split(" ") if t] for line in lines]

    began = time.perf_counter()
    results = [None] * len(sources)
    chunk = 16 * args.batch_size  # CTranslate2's read_batch_size, sorted by length
    for c in range(0, len(sources), chunk):
        order = sorted(range(c, min(c + chunk, len(sources))), key=lambda i: len(sources[i]))
        for b in range(0, len(order), args.batch_size):
            batch = order[b:b + args.batch_size]
            for i, r in zip(batch, translate(model, [sources[i] for i in batch], args.beam_size)):
                results[i] = r
    elapsed = time.perf_counter() - began

    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    for toks, score in results:
        text = " ".join(target_vocab[t] for t in toks)
        out.write(f"{score:.6f} ||| {text}\n" if args.with_score else text + "\n")
    if out is not sys.stdout:
        out.close()
    print(f"{len(sources)} lines in {elapsed:.2f} s: {len(sources) / elapsed:.0f} lines/s "
          f"(beam {args.beam_size}, batch {args.batch_size}, {torch.get_num_threads()} thread(s))",
          file=sys.stderr)


def check_examples(args):
    """examples.jsonl: teacher-forced log-probs and greedy outputs/scores within 1e-5."""
    model = Model(args.model)
    cfg = model.cfg
    folder = Path(args.model)
    source = {t: i for i, t in enumerate(read_vocab(folder / "source_vocab.txt"))}
    target_vocab = read_vocab(folder / "target_vocab.txt")
    target = {t: i for i, t in enumerate(target_vocab)}
    examples = [json.loads(l) for l in (folder / "examples.jsonl").read_text().splitlines()]
    sources = [[source[t] for t in ex["source_tokens"]] for ex in examples]
    batched = greedy_search(model, sources)  # all examples in one padded batch
    failures, worst = 0, 0.0
    for ex, src, in_batch in zip(examples, sources, batched):
        # Teacher forcing: plain log_softmax at every step (no min-length rule).
        state = model.start(*source_tensors([src], cfg.pad))
        fed = [cfg.decoder_start] + [target[t] for t in ex["expected"]]
        wanted = [target[t] for t in ex["expected"]] + [cfg.eos]
        got = []
        for token, want in zip(fed, wanted):
            logits = model.step(state, torch.tensor([token]))
            got.append(float(torch.log_softmax(logits, dim=-1)[0, want]))
        errors = [abs(g - w) for g, w in zip(got, ex["expected_token_log_probs"])]
        worst = max([worst] + errors)
        # Greedy, alone and inside a padded batch with the other examples' sources.
        (toks, score, logprobs), = greedy_search(model, [src])
        text = [target_vocab[t] for t in toks]
        score_error = abs(score - ex["expected_score"])
        worst = max(worst, score_error)
        same = in_batch[0] == toks
        batch_error = max(abs(a - b) for a, b in zip(in_batch[2], logprobs)) if same else math.inf
        worst = max(worst, batch_error)
        ok = (max(errors) <= 1e-5 and text == ex["expected"] and score_error <= 1e-5
              and batch_error <= 1e-5)
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {ex['name']}: {' '.join(text)} score {score:.6f} "
              f"(expected {ex['expected_score']}), largest log-prob error {max(errors):.2e}")
    print(f"largest error {worst:.2e}; {failures} failure(s)")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(
        description="PyTorch reference of masque's encoder-decoder plugin (greedy and "
                    "CTranslate2-style beam search).")
    parser.add_argument("input", nargs="?", help="source file, one space-separated line each")
    parser.add_argument("output", nargs="?", default="-", help="output file (- = stdout)")
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="model folder")
    parser.add_argument("--beam-size", type=int, default=2, help="1 = greedy (default 2)")
    parser.add_argument("--batch-size", type=int, default=32, help="sources per batch")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--with-score", action="store_true", help="write 'score ||| tokens'")
    parser.add_argument("--check-examples", action="store_true",
                        help="verify the model's examples.jsonl and exit")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    if args.check_examples:
        return check_examples(args)
    if not args.input:
        parser.error("an input file is required")
    translate_file(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
