#!/usr/bin/python3
"""Plain-torch reference trainer for `masque train` (issue: training under any mask).

Written from the text of docs/training.md and the upstream models' semantics (Hugging Face's
modeling_bert.py, modeling_gpt2.py, modeling_llama.py; masque's encoder-decoder README), with
python3-torch only. It is the yardstick the trainer's exactness tests compare against:

  * the network: BERT (BertForMaskedLM), GPT-2 (GPT2LMHeadModel), Llama (LlamaForCausalLM) and
    masque's `encoder-decoder`, read from a Hugging Face style folder (config.json +
    model.safetensors), as torch modules with one parameter per stored tensor (tied tensors are
    one parameter);
  * the mask: masque's rule over per-token ranks and roles (DESIGN.md, core mask.hpp):
    key j is visible to query i when role[j] != pad and (i == j or (role[j] == content and
    rank[j] <= rank[i]));
  * the objectives and their token layout (docs/training.md "Objectives");
  * the step: loss = sum of token losses of all micro-batches of the step / their count,
    torch.optim.AdamW, Hugging Face's schedules, torch.nn.utils.clip_grad_norm_.

Usage:
    reference_trainer.py PLAN.json --losses OUT.jsonl [--grads OUT.safetensors]
                         [--weights OUT.safetensors]
    reference_trainer.py --check-forward      # the models against ../shared's references

PLAN.json:
    {"model": "FOLDER", "objective": "causal-lm" | "seq2seq" | "plm" | "diffusion" | "given",
     "mask": "causal" | "seq2seq" | "bidirectional" | "block-causal",   (which mask teaches)
     "examples": [{"ids": [...]} | {"source": [...], "target": [...]} (+ "order": [...])],
     "batch_size": 4, "accumulation": 1, "steps": 200, "dtype": "float32" | "float64",
     "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01,
     "schedule": "linear" | "constant" | "cosine", "warmup_steps": 0,
     "max_grad_norm": 1.0 (0: no clipping), "label_smoothing": 0.0,
     "plm_predict": K (the last K positions of the order are predicted),
     "seed": 0, "diffusion_eps": 1e-3, "block_size": 4, "plm_target_slack": -1 (diffusion),
     "special": {"cls": 101, "sep": 102, "mask": 103},
     "dropout_masks": "MASKS.safetensors" (optional)}
Examples are token ids; batches are examples kN .. kN+N-1 in order, cycling over epochs.
Objective "diffusion": examples {"source", "target", "line"}; the noise is drawn here from the
seed, epoch and line by docs/training.md's definition (SplitMix64, as masque/random.hpp).
Objective "given": each example is a micro-batch laid out by the caller (see given_layout), for
layouts with randomness of their own (mlm's corruption).
Dropout masks: factors (0 or 1 / (1 - p)) by site, in the padded layout of the (single) batch,
multiplied in where the upstream models apply dropout: "embeddings" [B, T, C] (BERT: after the
embedding LayerNorm; GPT-2: wte + wpe), "layer.L.attention.probs" [B, H, T, T] (the softmax),
"layer.L.attention.output" and "layer.L.output" [B, T, C] (the attention and MLP sub-layers'
outputs before the residual add); the encoder-decoder's "SIDE.embeddings",
"SIDE.layer.L.SUB.output" and "SIDE.layer.L.SUB.probs" for SUB self_attn, encoder_attn (decoder)
and ffn, and "SIDE.layer.L.ffn.activation" [B, T, ffn]. Without them nothing is dropped.
"""

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
SHARED = (REPO / ".." / "shared").resolve()
sys.path.insert(0, str(REPO / "bench" / "encdec"))
from reference_torch import Config as EncDecConfig, sinusoid  # noqa: E402  (one home)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from safetensors_file import write_safetensors  # noqa: E402

# ---- safetensors ------------------------------------------------------------------------------

DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I32": (torch.int32, 4)}


def read_safetensors(path):
    data = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dtype, _ = DTYPES[e["dtype"]]
        raw = bytearray(data[8 + size + b:8 + size + end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"]).to(torch.float64 if dtype.is_floating_point else dtype)
    return out




# ---- the mask rule ----------------------------------------------------------------------------

PAD, CONTENT, QUERY, BLOCK_QUERY = 0, 1, 2, 3


def allowed(rank, role):
    """[B, T] ranks and roles -> [B, T(query), T(key)] bool, masque's rule (block_query tokens
    also see the block_query tokens of their own rank)."""
    t = rank.shape[1]
    eye = torch.eye(t, dtype=torch.bool)[None]
    visible = (role[:, None, :] == CONTENT) & (rank[:, None, :] <= rank[:, :, None])
    peers = ((role[:, None, :] == BLOCK_QUERY) & (role[:, :, None] == BLOCK_QUERY)
             & (rank[:, None, :] == rank[:, :, None]))
    return (role[:, None, :] != PAD) & (eye | visible | peers)


# ---- masque/random.hpp ------------------------------------------------------------------------

M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53


def mix_seed(a, b, c=0):
    second = SplitMix64(SplitMix64(a).next() ^ b)
    return SplitMix64(second.next() ^ c).next()


def attend(q, k, v, mask, scale, dropout=None):
    """q/k/v [B, H, T, d]; mask [B, Tq, Tk] bool -> [B, Tq, H*d]; rows with no key give 0.
    dropout: factors [B, H, Tq, Tk] for the probabilities, or None."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    if dropout is not None:
        probs = probs * dropout
    out = torch.matmul(probs, v)
    b, h, t, d = out.shape
    return out.transpose(1, 2).reshape(b, t, h * d)


def split_heads(x, heads):
    b, t, c = x.shape
    return x.view(b, t, heads, c // heads).transpose(1, 2)


ACT = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu,
       "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
       "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
       "gelu_fast": lambda x: F.gelu(x, approximate="tanh")}


# ---- models: parameters named as the Hugging Face folder names them -------------------------


class Network(torch.nn.Module):
    """Holds the folder's tensors as parameters under their stored names ('.' -> '/')."""

    def __init__(self, folder, dtype, tied=()):
        super().__init__()
        self.folder = Path(folder)
        self.cfg = json.loads((self.folder / "config.json").read_text())
        self.store = torch.nn.ParameterDict()
        self.aliases = dict(tied)  # name -> the name it is tied to
        self.masks = {}  # dropout factors by site (see the plan's dropout_masks)
        for name, t in read_safetensors(self.folder / "model.safetensors").items():
            if name not in self.aliases:
                self.store[name.replace(".", "/")] = torch.nn.Parameter(t.to(dtype))

    def w(self, name):
        return self.store[self.aliases.get(name, name).replace(".", "/")]

    def has(self, name):
        return self.aliases.get(name, name).replace(".", "/") in self.store

    def named(self):
        return {k.replace("/", "."): p for k, p in self.store.items()}

    def drop(self, x, site):
        m = self.masks.get(site)
        return x if m is None else x * m


class Bert(Network):
    def __init__(self, folder, dtype):
        super().__init__(folder, dtype, {"cls.predictions.decoder.weight":
                                         "bert.embeddings.word_embeddings.weight"})
        c = self.cfg
        self.heads, self.eps = c["num_attention_heads"], c["layer_norm_eps"]
        self.act = ACT[c["hidden_act"]]

    def ln(self, x, p):
        return F.layer_norm(x, x.shape[-1:], self.w(p + ".weight"), self.w(p + ".bias"), self.eps)

    def lin(self, x, p):
        return F.linear(x, self.w(p + ".weight"), self.w(p + ".bias"))

    def forward(self, ids, positions, types, mask):
        e = "bert.embeddings."
        x = (self.w(e + "word_embeddings.weight")[ids] + self.w(e + "position_embeddings.weight")[
            positions] + self.w(e + "token_type_embeddings.weight")[types])
        x = self.drop(self.ln(x, e + "LayerNorm"), "embeddings")
        d = x.shape[-1] // self.heads
        for l in range(self.cfg["num_hidden_layers"]):
            p, site = f"bert.encoder.layer.{l}.", f"layer.{l}."
            q, k, v = (split_heads(self.lin(x, p + "attention.self." + n), self.heads)
                       for n in ("query", "key", "value"))
            a = self.lin(attend(q, k, v, mask, 1 / math.sqrt(d), self.masks.get(
                site + "attention.probs")), p + "attention.output.dense")
            x = self.ln(x + self.drop(a, site + "attention.output"), p + "attention.output.LayerNorm")
            h = self.lin(self.act(self.lin(x, p + "intermediate.dense")), p + "output.dense")
            x = self.ln(x + self.drop(h, site + "output"), p + "output.LayerNorm")
        t = self.ln(self.act(self.lin(x, "cls.predictions.transform.dense")),
                    "cls.predictions.transform.LayerNorm")
        return F.linear(t, self.w("cls.predictions.decoder.weight"), self.w("cls.predictions.bias"))


class Gpt2(Network):
    def __init__(self, folder, dtype):
        names = read_safetensors(Path(folder) / "model.safetensors").keys()
        self.prefix = "transformer." if "transformer.wte.weight" in names else ""
        super().__init__(folder, dtype, {"lm_head.weight": self.prefix + "wte.weight"}
                         if json.loads((Path(folder) / "config.json").read_text()).get(
                             "tie_word_embeddings", True) else {})
        c = self.cfg
        self.heads, self.eps = c["n_head"], c["layer_norm_epsilon"]
        self.act = ACT[c.get("activation_function", "gelu_new")]

    def ln(self, x, p):
        p = self.prefix + p
        return F.layer_norm(x, x.shape[-1:], self.w(p + ".weight"), self.w(p + ".bias"), self.eps)

    def conv1d(self, x, p):  # GPT-2 stores [in, out]
        p = self.prefix + p
        return x @ self.w(p + ".weight") + self.w(p + ".bias")

    def forward(self, ids, positions, types, mask):
        del types
        x = self.w(self.prefix + "wte.weight")[ids] + self.w(self.prefix + "wpe.weight")[positions]
        x = self.drop(x, "embeddings")
        c = x.shape[-1]
        for l in range(self.cfg["n_layer"]):
            p, site = f"h.{l}.", f"layer.{l}."
            qkv = self.conv1d(self.ln(x, p + "ln_1"), p + "attn.c_attn")
            q, k, v = (split_heads(t, self.heads) for t in qkv.split(c, dim=-1))
            a = self.conv1d(attend(q, k, v, mask, 1 / math.sqrt(c // self.heads),
                                   self.masks.get(site + "attention.probs")), p + "attn.c_proj")
            x = x + self.drop(a, site + "attention.output")
            h = self.conv1d(self.act(self.conv1d(self.ln(x, p + "ln_2"), p + "mlp.c_fc")),
                            p + "mlp.c_proj")
            x = x + self.drop(h, site + "output")
        return F.linear(self.ln(x, "ln_f"), self.w("lm_head.weight"))


class Llama(Network):
    def __init__(self, folder, dtype):
        cfg = json.loads((Path(folder) / "config.json").read_text())
        super().__init__(folder, dtype, {"lm_head.weight": "model.embed_tokens.weight"}
                         if cfg.get("tie_word_embeddings", False) else {})
        c = self.cfg
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps, self.theta = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
        self.bias = c.get("attention_bias", False)

    def rms(self, x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w(p + ".weight")

    def lin(self, x, p, bias=False):
        return F.linear(x, self.w(p + ".weight"), self.w(p + ".bias") if bias else None)

    def rotate(self, x, positions):  # x [B, H, T, d]; HF rotate_half
        d = self.head_dim
        inv = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angle = positions.to(torch.float64)[:, :, None] * inv  # [B, T, d/2]
        cos = torch.cat([angle.cos()] * 2, -1)[:, None].to(x.dtype)
        sin = torch.cat([angle.sin()] * 2, -1)[:, None].to(x.dtype)
        x1, x2 = x[..., :d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, ids, positions, types, mask):
        del types
        x = self.w("model.embed_tokens.weight")[ids]
        group = self.heads // self.kv_heads
        for l in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = self.rms(x, p + "input_layernorm")
            q = self.rotate(split_heads(self.lin(h, p + "self_attn.q_proj", self.bias), self.heads),
                            positions)
            k = self.rotate(split_heads(self.lin(h, p + "self_attn.k_proj", self.bias),
                                        self.kv_heads), positions)
            v = split_heads(self.lin(h, p + "self_attn.v_proj", self.bias), self.kv_heads)
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            a = attend(q, k, v, mask, 1 / math.sqrt(self.head_dim),
                       self.masks.get(f"layer.{l}.attention.probs"))
            x = x + self.lin(a, p + "self_attn.o_proj")
            h = self.rms(x, p + "post_attention_layernorm")
            x = x + self.lin(F.silu(self.lin(h, p + "mlp.gate_proj")) * self.lin(h, p + "mlp.up_proj"),
                             p + "mlp.down_proj")
        return self.lin(self.rms(x, "model.norm"), "lm_head")


class EncDec(Network):
    """masque's `encoder-decoder` (plugins/models/encoder-decoder/README.md), teacher-forced."""

    def __init__(self, folder, dtype):
        cfg = EncDecConfig(Path(folder) / "config.json")
        tied = {}
        if cfg.shared_embeddings:
            tied = {"encoder.embed_tokens.weight": "shared.weight",
                    "decoder.embed_tokens.weight": "shared.weight"}
        if cfg.tie_output:
            tied["lm_head.weight"] = "shared.weight" if cfg.shared_embeddings \
                else "decoder.embed_tokens.weight"
        super().__init__(folder, dtype, tied)
        self.c = cfg
        self.act = ACT[cfg.activation]
        self.positions = sinusoid(cfg).to(dtype) if cfg.positions == "sinusoidal" else None

    def lin(self, x, p, bias):
        return F.linear(x, self.w(p + ".weight"), self.w(p + ".bias") if bias else None)

    def ln(self, x, p):
        return F.layer_norm(x, x.shape[-1:], self.w(p + ".weight"), self.w(p + ".bias"), self.c.eps)

    def block(self, x, p, f, site=""):
        """Dropout site `site`.output on the sub-layer's output (fairseq: before the residual)."""
        out = site + ".output"
        return (x + self.drop(f(self.ln(x, p)), out) if self.c.pre_norm
                else self.ln(x + self.drop(f(x), out), p))

    def embed(self, ids, side):
        e = self.w(f"{side}.embed_tokens.weight")[ids] * self.c.embedding_scale
        t = ids.shape[1]
        if self.positions is not None:
            return self.drop(e + self.positions[:t][None], f"{side}.embeddings")
        off = self.c.position_offset
        e = e + self.w(f"{side}.embed_positions.weight")[off:off + t][None]
        return self.drop(e, f"{side}.embeddings")

    def attention(self, h, kv, p, mask, site=""):
        b = self.c.attention_bias
        q = split_heads(self.lin(h, p + ".q_proj", b), self.c.heads)
        k = split_heads(self.lin(kv, p + ".k_proj", b), self.c.heads)
        v = split_heads(self.lin(kv, p + ".v_proj", b), self.c.heads)
        return self.lin(attend(q, k, v, mask, self.c.attention_scale,
                               self.masks.get(site + ".probs")), p + ".out_proj", b)

    def ffn(self, h, p, site=""):
        b = self.c.ffn_bias
        a = self.drop(self.act(self.lin(h, p + ".fc1", b)), site + ".activation")
        return self.lin(a, p + ".fc2", b)

    def forward(self, source, source_valid, target, target_valid):
        s, t = source.shape[1], target.shape[1]
        enc_mask = source_valid[:, None, :].expand(-1, s, -1)
        x = self.embed(source, "encoder")
        for l in range(self.c.encoder_layers):
            p, site = f"encoder.layers.{l}", f"encoder.layer.{l}"
            x = self.block(x, p + ".self_attn_layer_norm", lambda h, p=p, s=site: self.attention(
                h, h, p + ".self_attn", enc_mask, s + ".self_attn"), site + ".self_attn")
            x = self.block(x, p + ".final_layer_norm",
                           lambda h, p=p, s=site: self.ffn(h, p, s + ".ffn"), site + ".ffn")
        memory = self.ln(x, "encoder.layer_norm") if self.c.encoder_final_norm else x
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))[None] & target_valid[:, None, :]
        causal = causal | torch.eye(t, dtype=torch.bool)[None]
        cross = source_valid[:, None, :].expand(-1, t, -1)
        y = self.embed(target, "decoder")
        for l in range(self.c.decoder_layers):
            p, site = f"decoder.layers.{l}", f"decoder.layer.{l}"
            y = self.block(y, p + ".self_attn_layer_norm", lambda h, p=p, s=site: self.attention(
                h, h, p + ".self_attn", causal, s + ".self_attn"), site + ".self_attn")
            y = self.block(y, p + ".encoder_attn_layer_norm", lambda h, p=p, s=site: self.attention(
                h, memory, p + ".encoder_attn", cross, s + ".encoder_attn"),
                site + ".encoder_attn")
            y = self.block(y, p + ".final_layer_norm",
                           lambda h, p=p, s=site: self.ffn(h, p, s + ".ffn"), site + ".ffn")
        if self.c.decoder_final_norm:
            y = self.ln(y, "decoder.layer_norm")
        bias = None
        if self.c.output_bias:
            bias = (self.w("lm_head.bias") if self.has("lm_head.bias")
                    else self.w("final_logits_bias").reshape(-1))
        return F.linear(y, self.w("lm_head.weight"), bias)


def load_model(folder, dtype):
    cfg = json.loads((Path(folder) / "config.json").read_text())
    kind = cfg.get("model_type") or cfg.get("architecture")
    if kind == "bert":
        return Bert(folder, dtype)
    if kind == "gpt2":
        return Gpt2(folder, dtype)
    if kind == "llama":
        return Llama(folder, dtype)
    if kind in ("transformer-encoder-decoder", "encoder-decoder") or "num_encoder_layers" in cfg:
        return EncDec(folder, dtype)
    raise SystemExit(f"{folder}: unknown model type {kind!r}")


# ---- objectives: the token layout of docs/training.md ----------------------------------------


def pad_to(rows, value):
    t = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (t - len(r)) for r in rows])


def lay_out(plan, examples, epoch=0):
    """A batch of examples -> model inputs, (flat row, label[, weight]) of the predicted tokens
    and the divisor they add (diffusion: the slots; otherwise the predicted tokens)."""
    objective, special = plan["objective"], plan.get("special", {})
    ids, pos, types, rank, role, labels = [], [], [], [], [], []
    count = 0
    for ex in examples:
        if objective == "causal-lm":  # every position after the first
            x = ex["ids"]
            r, o = list(range(len(x))), [CONTENT] * len(x)
            lab = [(p - 1, x[p]) for p in range(1, len(x))]
            i, p, ty = x, list(range(len(x))), [0] * len(x)
        elif objective == "seq2seq":  # [CLS] source [SEP] target [SEP]; loss on target [SEP]
            src, tgt = ex["source"], ex["target"]
            i = [special["cls"]] + src + [special["sep"]] + tgt + [special["sep"]]
            seg = [0] * (len(src) + 2) + [1] * (len(tgt) + 1)
            if plan.get("mask", "seq2seq") == "seq2seq":
                r, acc = [], 0
                for s in seg:
                    acc += s
                    r.append(acc)
            elif plan["mask"] == "causal":
                r = list(range(len(i)))
            else:
                raise SystemExit(f"seq2seq under mask {plan['mask']!r}")
            o, p, ty = [CONTENT] * len(i), list(range(len(i))), seg
            first = len(src) + 1  # the source's [SEP] predicts the first target token
            lab = [(q, i[q + 1]) for q in range(first, len(i) - 1)]
        elif objective == "plm":  # content in the order, queries for its last K positions
            x, order = ex["ids"], ex["order"]
            n, k = len(x), min(plan.get("plm_predict", len(ex["ids"])), len(x))
            r = [0] * n
            for t, q in enumerate(order):
                r[q] = t
            o, i, p, ty = [CONTENT] * n, list(x), list(range(n)), [0] * n
            lab = []
            for t in range(n - k, n):
                lab.append((len(i), x[order[t]]))
                i.append(special["mask"])
                p.append(order[t])
                ty.append(0)
                r.append(t - 1)
                o.append(QUERY)
        elif objective == "diffusion":  # [CLS] source [SEP] slots; the slots noised at ratio t
            src, tgt = ex["source"], ex["target"]
            slack = plan.get("plm_target_slack", -1)
            slots = tgt + [special["sep"]] * ((len(src) + slack - len(tgt)) if slack >= 0 else 0)
            i = [special["cls"]] + src + [special["sep"]] + slots
            first, n = len(src) + 2, len(src) + 2 + len(slots)
            ty, p = [0] * first + [1] * len(slots), list(range(n))
            rng = SplitMix64(mix_seed(plan.get("seed", 0), epoch, ex["line"]))
            t = 1.0 - (1.0 - plan.get("diffusion_eps", 1e-3)) * rng.uniform()
            masked = [rng.uniform() < t for _ in slots]
            o = [CONTENT] * n
            if plan["mask"] == "bidirectional":  # noise in place
                r, at = [0] * n, list(range(first, n))
            elif plan["mask"] == "block-causal":  # BD3-LM: clean slots, then their noised copy
                bs = plan.get("block_size", 4)
                r = [0] * first + [1 + k // bs for k in range(len(slots))]
                at = list(range(n, n + len(slots)))
                i = i + list(slots)
                p, ty = p + list(range(first, n)), ty + [1] * len(slots)
                r, o = r + [k // bs for k in range(len(slots))], o + [BLOCK_QUERY] * len(slots)
            else:
                raise SystemExit(f"diffusion under mask {plan['mask']!r}")
            lab = []
            for k, y in enumerate(slots):
                if masked[k]:
                    i[at[k]] = special["mask"]
                    lab.append((at[k], y, 1.0 / t))
            count += len(slots)
        else:
            raise SystemExit(f"objective {objective!r} is not in the reference")
        ids.append(i), pos.append(p), types.append(ty), rank.append(r), role.append(o)
        labels.append(lab)
    t = max(len(i) for i in ids)
    flat = [(b * t + e[0],) + tuple(e[1:]) for b, lab in enumerate(labels) for e in lab]
    mask = allowed(pad_to(rank, 0), pad_to(role, PAD))
    if objective != "diffusion":
        count = len(flat)
    return (pad_to(ids, 0), pad_to(pos, 0), pad_to(types, 0), mask), flat, count


def given_layout(batch):
    """A micro-batch laid out by the caller: {"ids", "positions", "types", "rank", "role"} as
    [B][T] lists, "rows" (flat b * T + t) and "labels"."""
    t = lambda key: torch.tensor(batch[key])  # noqa: E731
    return (t("ids"), t("positions"), t("types"), allowed(t("rank"), t("role"))), list(
        zip(batch["rows"], batch["labels"]))


def batch_loss_sum(model, plan, examples, smoothing, epoch=0):
    """Sum of the token losses of one micro-batch, and their count (epoch seeds the noise)."""
    if plan["objective"] == "given":  # each example is a whole micro-batch
        assert len(examples) == 1, "objective given: batch_size must be 1"
        inputs, flat = given_layout(examples[0])
        logits = model(*inputs)
        logits = logits.reshape(-1, logits.shape[-1])[torch.tensor([r for r, _ in flat])]
        gold = torch.tensor([y for _, y in flat])
    elif isinstance(model, EncDec):
        start, eos = model.c.decoder_start, model.c.eos
        src = pad_to([e["source"] for e in examples], 0)
        src_valid = pad_to([[1] * len(e["source"]) for e in examples], 0).bool()
        dec_in = pad_to([[start] + e["target"] for e in examples], 0)
        dec_valid = pad_to([[1] * (len(e["target"]) + 1) for e in examples], 0).bool()
        gold = pad_to([e["target"] + [eos] for e in examples], -100)
        logits = model(src, src_valid, dec_in, dec_valid)
        logits, gold = logits.reshape(-1, logits.shape[-1]), gold.reshape(-1)
    else:
        inputs, flat, count = lay_out(plan, examples, epoch)
        logits = model(*inputs)
        if plan["objective"] == "diffusion":  # each masked slot's loss weighted 1/t
            if not flat:
                return logits.sum() * 0.0, count
            logits = logits.reshape(-1, logits.shape[-1])[torch.tensor([e[0] for e in flat])]
            token = F.cross_entropy(logits, torch.tensor([e[1] for e in flat]), reduction="none",
                                    label_smoothing=smoothing)
            return (token * torch.tensor([e[2] for e in flat], dtype=token.dtype)).sum(), count
        logits = logits.reshape(-1, logits.shape[-1])[torch.tensor([e[0] for e in flat])]
        gold = torch.tensor([e[1] for e in flat])
    loss = F.cross_entropy(logits, gold, ignore_index=-100, reduction="sum",
                           label_smoothing=smoothing)
    return loss, int((gold != -100).sum())


# ---- the step -----------------------------------------------------------------------------------


def schedule(plan):
    """Hugging Face's lr lambdas (transformers/optimization.py) at optimizer step s."""
    kind, warm, total = plan.get("schedule", "linear"), plan.get("warmup_steps", 0), plan["steps"]

    def factor(s):
        if s < warm:
            return s / max(1, warm)
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return max(0.0, (total - s) / max(1, total - warm))
        progress = (s - warm) / max(1, total - warm)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    return factor


def decays(name, p):
    """Weight decay on matrices and embeddings, not on biases and norm weights."""
    return p.dim() >= 2 and not name.endswith("bias")


def train(plan, losses_out, grads_out=None, weights_out=None):
    dtype = torch.float64 if plan.get("dtype", "float32") == "float64" else torch.float32
    torch.set_default_dtype(dtype)
    model = load_model(plan["model"], dtype)
    if plan.get("dropout_masks"):
        model.masks = {k: t.to(dtype) for k, t in read_safetensors(plan["dropout_masks"]).items()}
    named = model.named()
    groups = [{"params": [p for n, p in named.items() if decays(n, p)],
               "weight_decay": plan.get("weight_decay", 0.0)},
              {"params": [p for n, p in named.items() if not decays(n, p)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=plan.get("lr", 1e-3), betas=tuple(plan.get("betas", (0.9, 0.999))),
                            eps=plan.get("eps", 1e-8))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(plan))
    examples, n = plan["examples"], plan["batch_size"]
    per_epoch = math.ceil(len(examples) / n)
    micro = 0
    with open(losses_out, "w") as out:
        for step in range(plan["steps"]):
            opt.zero_grad(set_to_none=False)
            parts = []
            for _ in range(plan.get("accumulation", 1)):
                b = micro % per_epoch
                parts.append((examples[b * n:(b + 1) * n], micro // per_epoch))
                micro += 1
            count = 0
            sums = []
            for batch, epoch in parts:
                s, c = batch_loss_sum(model, plan, batch, plan.get("label_smoothing", 0.0), epoch)
                sums.append(s)
                count += c
            loss = sum(sums) / count
            loss.backward()
            if grads_out and step == 0:
                write_safetensors(grads_out, {k: p.grad for k, p in named.items()})
            max_norm = plan.get("max_grad_norm", 1.0)
            norm = (torch.nn.utils.clip_grad_norm_(list(named.values()), max_norm) if max_norm > 0
                    else torch.sqrt(sum((p.grad.double() ** 2).sum() for p in named.values())))
            lr = opt.param_groups[0]["lr"]
            opt.step()
            sched.step()
            out.write(json.dumps({"step": step + 1, "loss": loss.item(), "lr": lr,
                                  "grad_norm": float(norm), "tokens": count}) + "\n")
    if weights_out:
        write_safetensors(weights_out, named)


# ---- forward checks against ../shared ---------------------------------------------------------


def causal_inputs(ids):
    t = len(ids)
    return (torch.tensor([ids]), torch.arange(t)[None], torch.zeros(1, t, dtype=torch.long),
            allowed(torch.arange(t)[None], torch.full((1, t), CONTENT)))


def nll(logits, ids):
    """Per-token NLL of ids[1:] given logits [T, V] (float64)."""
    lp = torch.log_softmax(logits.double(), -1)
    return [-float(lp[p - 1, ids[p]]) for p in range(1, len(ids))]


def check_forward():
    """The reference networks reproduce the float64 references shipped with ../shared."""
    worst = {}

    def note(name, diff):
        worst[name] = max(worst.get(name, 0.0), float(diff))

    with torch.no_grad():
        ref = json.loads((SHARED / "models/tiny-gpt2/reference.json").read_text())
        model = load_model(SHARED / "models/tiny-gpt2", torch.float64)
        for seq in ref["causal"]["sequences"]:
            logits = model(*causal_inputs(seq["input_ids"]))[0]
            for p in seq["positions"]:
                got = logits[p["position"], p["top10_ids"]]
                note("tiny-gpt2 logits", (got - torch.tensor(p["top10_logits"])).abs().max())

        ref = json.loads((SHARED / "models/stories260k/reference/prompt_logits.json").read_text())
        model = load_model(SHARED / "models/stories260k", torch.float64)
        for sent in ref["sentences"]:
            got = nll(model(*causal_inputs(sent["input_ids"]))[0], sent["input_ids"])
            note("stories260k token NLL", max(abs(a - b) for a, b in zip(got, sent["token_nll"])))

        for name in ("tiny-bert-uncased", "tiny-bert-chinese"):
            ref = json.loads((SHARED / f"models/{name}/reference.json").read_text())
            model = load_model(SHARED / f"models/{name}", torch.float64)
            inp = ref["input"]
            ids = torch.tensor([inp["input_ids"]])
            t = ids.shape[1]
            for mask_name, m in ref["masks"].items():
                mask = torch.tensor([m["allowed"]], dtype=torch.bool)  # as the reference says
                types = torch.tensor([m.get("token_type_ids", inp["token_type_ids"])])
                logits = model(ids, torch.arange(t)[None], types, mask)[0]
                for p in m["positions"]:
                    if p.get("is_pad"):
                        continue
                    got = logits[p["position"], p["top10_ids"]]
                    note(f"{name} logits ({mask_name})",
                         (got - torch.tensor(p["top10_logits"])).abs().max())

        model = load_model(SHARED / "models/aren-transliteration", torch.float64)
        src_vocab = (SHARED / "models/aren-transliteration/source_vocab.txt").read_text().split("\n")
        tgt_vocab = (SHARED / "models/aren-transliteration/target_vocab.txt").read_text().split("\n")
        for line in (SHARED / "models/aren-transliteration/examples.jsonl").read_text().splitlines():
            ex = json.loads(line)
            if "expected_token_log_probs" not in ex or "expected" not in ex:
                continue
            src = [src_vocab.index(tok) for tok in ex["source_tokens"]]
            tgt = [tgt_vocab.index(tok) for tok in ex["expected"]]
            dec = [model.c.decoder_start] + tgt
            logits = model(torch.tensor([src]), torch.ones(1, len(src), dtype=torch.bool),
                           torch.tensor([dec]), torch.ones(1, len(dec), dtype=torch.bool))[0]
            lp = torch.log_softmax(logits.double(), -1)
            got = [float(lp[i, y]) for i, y in enumerate(tgt + [model.c.eos])]
            note("aren token log-probs",
                 max(abs(a - b) for a, b in zip(got, ex["expected_token_log_probs"])))
    limits = {"aren token log-probs": 2e-5}  # the examples are rounded to ~6 digits
    failed = False
    for name, diff in worst.items():
        limit = limits.get(name, 1e-6)
        print(f"{name}: max |diff| {diff:.2e} (limit {limit:.0e})")
        failed |= not diff <= limit
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan", nargs="?")
    ap.add_argument("--losses")
    ap.add_argument("--grads")
    ap.add_argument("--weights")
    ap.add_argument("--check-forward", action="store_true")
    a = ap.parse_args()
    if a.check_forward:
        return check_forward()
    if not a.plan or not a.losses:
        ap.error("PLAN and --losses are required")
    train(json.loads(Path(a.plan).read_text()), a.losses, a.grads, a.weights)
    return 0


if __name__ == "__main__":
    sys.exit(main())
