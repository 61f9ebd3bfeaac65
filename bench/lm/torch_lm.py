#!/usr/bin/python3
"""PyTorch side of the language-model benchmark: GPT-2 and Llama written with torch ops.

    torch_lm.py MODEL_DIR --task score    --ids FILE --threads N --reps R
    torch_lm.py MODEL_DIR --task generate --ids FILE --threads N --reps R --new-tokens 128
    torch_lm.py MODEL_DIR --task corpus   --ids FILE --threads N --reps R --batch-size B

Reads the same Hugging Face folder as masque (config.json + model.safetensors, read with numpy;
model_type gpt2 or llama) and the same ids (one record of space-separated ids per line). Runs
in inference mode with torch.set_num_threads(N). After an untimed warm-up (a short version of
the work: the scoring batch, 8 decoding steps, the first 4 B records of a corpus), times R
repetitions of the whole work and prints one JSON line: every repetition's seconds and checksums
of the results (total NLL, generated ids) that bench.py compares with masque's.

score:    all records in one batch (equal lengths): forward, log-softmax, gather of the next
          token's log-probability at positions 0..n-2 (masque lm-score).
generate: one record at a time (batch 1): the prompt is prefilled into a preallocated KV cache,
          then greedy steps of one token; the end token is blocked (HF's min_length rule), as
          masque runs with decoder.min_new_tokens = new tokens.
corpus:   records of any length, scored in batches of B the way masque's runner forms them
          (windows of 16 B records sorted by length, cut into batches of B, right-padded).

Debian's PyTorch 1.13 sends float matmuls (F.linear, torch.matmul) to whatever libblas.so.3 the
loader finds: the reference BLAS (libblas3, 1-4 GFLOP/s) unless OpenBLAS is installed or put on
LD_LIBRARY_PATH (bench.py does the latter). --backend tuned (the default) uses the fastest path
this install offers for each product: f32 linears of several rows by whichever of oneDNN
(pre-packed once with torch.utils.mkldnn, PyTorch's bundled copy) and F.linear (the BLAS) was
faster the first time the layer saw about that many rows, bf16 ones by oneDNN, one-row
products (decoding) by whichever of four torch formulations measured fastest for that weight at
load time, long-sequence attention through oneDNN per head. --backend plain is the
straightforward code (F.linear and torch.matmul everywhere).
--dtype bf16 (tuned backend only) runs every linear in bfloat16 (weights stored as bf16, inputs
rounded per call, float32 activations elsewhere), as masque's model.matmul_dtype=bf16 does;
oneDNN then uses AMX where the CPU has it.
--dtype int8 runs every linear (the tied head too) through PyTorch's dynamic int8 quantization,
as close to masque's model.matmul_dtype=int8 as PyTorch allows: weights quantized once at load
per output channel, symmetric (torch.quantize_per_channel, axis 0, qint8, scale max|row|/127,
zero point 0, rounded half to even), packed with quantized.linear_prepack with the float bias;
each call runs quantized.linear_dynamic, which quantizes the input per tensor (one scale for all
rows), asymmetric uint8 with a zero point, over the full 8-bit range (reduce_range=False; masque
uses one symmetric int8 scale per row, which PyTorch does not offer), accumulates in int32 and
returns float32 with the bias added. GELU, layer norms, attention, softmax and the embeddings
stay float32. The tuned backend packs each weight for every quantized engine of this build
(oneDNN, QNNPACK) and runs each product on whichever was faster the first time the layer saw
about that many rows (here QNNPACK the layers' one-row products; oneDNN the rest, with AMX
kernels from 8 rows); plain runs the default engine (torch.backends.quantized.engine untouched:
onednn on Debian's 1.13, which has no fbgemm). The output line then says which engine each row
bucket got.
"""
import argparse
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.mkldnn


# ---- weights ---------------------------------------------------------------------------------

def read_safetensors(path):
    """name -> float32 torch tensor (a private copy, so that timing never touches the file)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}; this script reads F32 only")
        a, b = info["data_offsets"]
        array = np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out


# ---- products --------------------------------------------------------------------------------

def time_call(fn, repeats=3):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def row_product_candidates(w_out_in, dtype):
    """Ways to compute one row times the weight; their speeds differ by shape on this install
    (bf16 mm / linear go to oneDNN, f32 ones to the reference BLAS)."""
    w = w_out_in.to(dtype)
    w_in_out = w.t().contiguous()
    return {
        "linear": lambda x: F.linear(x, w),
        "mm": lambda x: torch.mm(x, w_in_out),
        "mv": lambda x: torch.mv(w, x[0]).unsqueeze(0),
        "mul-sum": lambda x: (w * x).sum(dim=1).unsqueeze(0),
    }


def fastest_row_product(w_out_in, dtype):
    candidates = row_product_candidates(w_out_in, dtype)
    x = torch.randn(1, w_out_in.shape[1], dtype=dtype)
    with torch.inference_mode():
        name = min(candidates, key=lambda n: time_call(lambda: candidates[n](x)))
    return candidates[name]


def row_bucket(rows):
    return 1 << (rows - 1).bit_length()


# ---- int8 products ---------------------------------------------------------------------------

def int8_engines():
    """The quantized engines of this build that can run linear_dynamic, the default one first
    (1.13 on Debian: onednn, then qnnpack; no fbgemm)."""
    engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    return sorted(engines, key=lambda e: e != torch.backends.quantized.engine)


def quantize_weight(w_out_in):
    """W [out, in] as qint8, one symmetric scale per output channel (max|row| / 127, zero point
    0; an all-zero row gets scale 1): values round half to even into -127..127."""
    scale = w_out_in.abs().amax(dim=1).double() / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.zeros(w_out_in.shape[0], dtype=torch.long)
    return torch.quantize_per_channel(w_out_in, scale, zero, 0, torch.qint8)


def prepack_int8(q, bias, engine=None):
    """quantized.linear_prepack packs for the current engine (the packed weight then runs on it
    whatever the engine is at call time); `engine` None keeps the current one."""
    if engine is None:
        return torch.ops.quantized.linear_prepack(q, bias)
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        return torch.ops.quantized.linear_prepack(q, bias)
    finally:
        torch.backends.quantized.engine = previous


def fastest_int8(packed, x, repeats):
    """The engine (key of `packed`) whose linear_dynamic of x was fastest. Each runs once
    untimed (oneDNN creates its matmul primitive then), then `repeats` times timed.

    QNNPACK's products of many rows take ten times oneDNN's (9 s for the head at 2,048 rows on
    one thread), so the warm-up does not wait for them: after the first engine, another is
    dropped when its untimed call took over 4x the best time so far (and over 50 ms), and on 64
    rows or more it first runs an eighth of the rows, dropped if 8x that time is over the same
    bound.

    Every call gets differently scaled rows, as real calls do: oneDNN builds (JIT-compiles) its
    input-quantizing reorder for each new scale and zero point, which a repeated input would
    hide (its one-row products would look 2-3x faster than they run in decoding, and win)."""
    if len(packed) == 1:
        return next(iter(packed))
    inputs = [x * (1 + i / 1024) for i in range(len(packed) * (2 + repeats))]
    best, pick = float("inf"), None
    for engine, p in packed.items():
        if best < float("inf") and x.shape[0] >= 64:
            t = time.perf_counter()
            torch.ops.quantized.linear_dynamic(inputs.pop()[:x.shape[0] // 8], p, False)
            if 8 * (time.perf_counter() - t) > max(4 * best, 0.05):
                continue
        t = time.perf_counter()
        torch.ops.quantized.linear_dynamic(inputs.pop(), p, False)
        if time.perf_counter() - t > max(4 * best, 0.05):
            continue
        for _ in range(repeats):
            xi = inputs.pop()
            t = time.perf_counter()
            torch.ops.quantized.linear_dynamic(xi, p, False)
            t = time.perf_counter() - t
            if t < best:
                best, pick = t, engine
    return pick


class Linear:
    """y = x W^T + b for W [out, in] (nn.Linear layout); x and y float32, the product in
    `dtype` (float32, bfloat16, or torch.qint8 for PyTorch's dynamic int8 products)."""

    def __init__(self, w_out_in, bias, backend, dtype=torch.float32):
        self.w, self.bias, self.backend, self.dtype = w_out_in.contiguous(), bias, backend, dtype
        if dtype == torch.qint8:
            q = quantize_weight(self.w)
            if backend == "plain":  # the default engine, as a user who never picks one gets
                self.int8 = {torch.backends.quantized.engine: prepack_int8(q, bias)}
            else:
                self.int8 = {e: prepack_int8(q, bias, e) for e in int8_engines()}
            self.int8_choice = {}  # row bucket -> engine, measured on first use
            self.w = None
        elif backend == "tuned":
            dense = torch.nn.Linear(self.w.shape[1], self.w.shape[0], bias=bias is not None)
            dense.weight.data.copy_(self.w)
            if bias is not None:
                dense.bias.data.copy_(bias)
            self.packed = torch.utils.mkldnn.to_mkldnn(dense, dtype)
            self.one_row = fastest_row_product(self.w, dtype)
            self.several_rows = {}  # row bucket -> the faster f32 product, measured on first use
            if dtype != torch.float32:
                self.w = None  # bf16 products of several rows always go to oneDNN

    def __call__(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.dtype == torch.qint8:
            y = self.int8_rows(x2)
        elif self.backend == "plain":
            y = F.linear(x2, self.w, self.bias)
        elif x2.shape[0] == 1:
            y = self.one_row(x2.to(self.dtype)).float()
            y = y if self.bias is None else y + self.bias
        elif self.dtype == torch.float32:
            y = self.f32_rows(x2)
        else:  # MkldnnLinear keeps bf16 outputs in bf16
            y = self.packed(x2.to(self.dtype)).float()
        return y.reshape(*shape[:-1], y.shape[-1])

    def f32_rows(self, x2):
        """oneDNN (pre-packed) or F.linear (the BLAS PyTorch runs on), whichever was faster the
        first time this layer saw about as many rows: OpenBLAS beats PyTorch's oneDNN on some
        shapes, the reference BLAS on none."""
        bucket = row_bucket(x2.shape[0])
        product = self.several_rows.get(bucket)
        if product is None:
            candidates = [self.packed, lambda x: F.linear(x, self.w, self.bias)]
            product = min(candidates, key=lambda f: time_call(lambda: f(x2), repeats=1))
            self.several_rows[bucket] = product
        return product(x2)

    def int8_rows(self, x2):
        """The int8 product on the engine that was fastest the first time this layer saw about
        as many rows (one-row products timed best of 3, as the f32 ones are)."""
        bucket = row_bucket(x2.shape[0])
        engine = self.int8_choice.get(bucket)
        if engine is None:
            engine = fastest_int8(self.int8, x2, repeats=3 if bucket == 1 else 1)
            self.int8_choice[bucket] = engine
        return torch.ops.quantized.linear_dynamic(x2, self.int8[engine], False)


# ---- attention -------------------------------------------------------------------------------

def mkldnn_matmul_t(a, b):
    """a [m, k] @ b [n, k]^T through oneDNN (an inner product with b as the weight)."""
    return torch._C._nn.mkldnn_linear(a.to_mkldnn(), b.contiguous().to_mkldnn()).to_dense()


def attend(q, k, v, scale, start, backend):
    """q [B, H, T, d] at positions start..start+T-1 against k, v [B, H, S, d], causally."""
    t, s = q.shape[2], k.shape[2]
    allowed = torch.arange(s)[None, :] <= (start + torch.arange(t))[:, None]
    if t == 1 and backend == "tuned":  # a decoding step: one query per row
        w = torch.softmax((q * k).sum(dim=-1, keepdim=True) * scale, dim=2)
        return (w * v).sum(dim=2, keepdim=True)
    if backend == "plain" or t * s * q.shape[3] < (1 << 20):  # small: BLAS calls are cheap
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        return torch.matmul(torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1), v)
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            scores = mkldnn_matmul_t(q[b, h], k[b, h]) * scale
            weights = torch.softmax(scores.masked_fill_(~allowed, float("-inf")), dim=-1)
            out[b, h] = mkldnn_matmul_t(weights, v[b, h].t())
    return out


# ---- models ----------------------------------------------------------------------------------

class Model:
    """Shared by both architectures: caches, head, the token loop."""

    def new_cache(self, batch, length):
        shape = (batch, self.kv_heads, length, self.head_dim)
        return [(torch.empty(shape), torch.empty(shape)) for _ in range(self.num_layers)]

    def body(self, ids, caches=None, start=0):
        """ids [B, T] at positions start.. -> final normed hidden states [B, T, C]."""
        x = self.embed(ids, start)
        for l in range(self.num_layers):
            x = self.block(l, x, None if caches is None else caches[l], start)
        return self.final_norm(x)

    def attention(self, q, k, v, cache, start):
        """q, k, v [B, H(kv), T, d]; the cache (K, V) gets k, v at [start, start + T)."""
        if cache is not None:
            t = q.shape[2]
            cache[0][:, :, start:start + t] = k
            cache[1][:, :, start:start + t] = v
            k, v = cache[0][:, :, :start + t], cache[1][:, :, :start + t]
        if self.kv_heads != self.heads:
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return attend(q, k, v, self.scale, start, self.backend)


class Gpt2(Model):
    def __init__(self, cfg, w, backend, dtype):
        p = "transformer." if "transformer.wte.weight" in w else ""
        self.backend = backend
        self.num_layers, self.heads, self.hidden = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
        self.kv_heads, self.head_dim = self.heads, self.hidden // self.heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.wte, self.wpe = w[p + "wte.weight"], w[p + "wpe.weight"]

        def conv1d(name):  # HF Conv1D stores [in, out]
            return Linear(w[name + ".weight"].t(), w[name + ".bias"], backend, dtype)

        self.layers = []
        for l in range(self.num_layers):
            h = f"{p}h.{l}."
            self.layers.append({
                "ln_1": (w[h + "ln_1.weight"], w[h + "ln_1.bias"]),
                "ln_2": (w[h + "ln_2.weight"], w[h + "ln_2.bias"]),
                "c_attn": conv1d(h + "attn.c_attn"), "attn_proj": conv1d(h + "attn.c_proj"),
                "c_fc": conv1d(h + "mlp.c_fc"), "mlp_proj": conv1d(h + "mlp.c_proj"),
            })
        self.ln_f = (w[p + "ln_f.weight"], w[p + "ln_f.bias"])
        self.head = Linear(w.get("lm_head.weight", self.wte), None, backend, dtype)

    def norm(self, x, wb):
        return F.layer_norm(x, (self.hidden,), wb[0], wb[1], self.eps)

    def embed(self, ids, start):
        return self.wte[ids] + self.wpe[start:start + ids.shape[1]]

    def final_norm(self, x):
        return self.norm(x, self.ln_f)

    def block(self, l, x, cache, start):
        layer = self.layers[l]
        b, t, _ = x.shape
        qkv = layer["c_attn"](self.norm(x, layer["ln_1"]))
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in qkv.split(self.hidden, 2))
        a = self.attention(q, k, v, cache, start).transpose(1, 2).reshape(x.shape)
        x = x + layer["attn_proj"](a)
        m = F.gelu(layer["c_fc"](self.norm(x, layer["ln_2"])), approximate="tanh")
        return x + layer["mlp_proj"](m)


class Llama(Model):
    def __init__(self, cfg, w, backend, dtype):
        self.backend = backend
        self.num_layers, self.hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim", self.hidden // self.heads)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.embed_tokens = w["model.embed_tokens.weight"]
        self.layers = []
        for l in range(self.num_layers):
            p = f"model.layers.{l}."
            lin = lambda name: Linear(w[p + name + ".weight"], w.get(p + name + ".bias"), backend,
                                      dtype)
            self.layers.append({
                "in_norm": w[p + "input_layernorm.weight"],
                "post_norm": w[p + "post_attention_layernorm.weight"],
                "q": lin("self_attn.q_proj"), "k": lin("self_attn.k_proj"),
                "v": lin("self_attn.v_proj"), "o": lin("self_attn.o_proj"),
                "gate": lin("mlp.gate_proj"), "up": lin("mlp.up_proj"), "down": lin("mlp.down_proj"),
            })
        self.norm_weight = w["model.norm.weight"]
        self.head = Linear(w.get("lm_head.weight", self.embed_tokens), None, backend, dtype)
        # HF rotate_half rotary tables, angles in float64 as masque computes them.
        positions = cfg.get("max_position_embeddings", 2048)
        inv = 1.0 / (cfg.get("rope_theta", 10000.0) **
                     (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim))
        angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv)
        angles = torch.cat([angles, angles], dim=-1)
        self.cos, self.sin = angles.cos().float(), angles.sin().float()

    def rms(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def embed(self, ids, start):
        return self.embed_tokens[ids]

    def final_norm(self, x):
        return self.rms(x, self.norm_weight)

    def rotate(self, x, start):
        t, half = x.shape[2], self.head_dim // 2
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def block(self, l, x, cache, start):
        layer = self.layers[l]
        b, t, _ = x.shape
        h = self.rms(x, layer["in_norm"])
        q = layer["q"](h).view(b, t, self.heads, -1).transpose(1, 2)
        k = layer["k"](h).view(b, t, self.kv_heads, -1).transpose(1, 2)
        v = layer["v"](h).view(b, t, self.kv_heads, -1).transpose(1, 2)
        q, k = self.rotate(q, start), self.rotate(k, start)
        a = self.attention(q, k, v, cache, start).transpose(1, 2).reshape(b, t, -1)
        x = x + layer["o"](a)
        h = self.rms(x, layer["post_norm"])
        return x + layer["down"](F.silu(layer["gate"](h)) * layer["up"](h))


def int8_engine_counts(model):
    """row bucket -> {engine: number of linears that run it} (--dtype int8)."""
    linears = [v for layer in model.layers for v in layer.values() if isinstance(v, Linear)]
    counts = {}
    for linear in linears + [model.head]:
        for bucket, engine in sorted(linear.int8_choice.items()):
            per_engine = counts.setdefault(str(bucket), {})
            per_engine[engine] = per_engine.get(engine, 0) + 1
    return counts


def load_model(model_dir, backend, dtype=torch.float32):
    with open(f"{model_dir}/config.json") as f:
        cfg = json.load(f)
    weights = read_safetensors(f"{model_dir}/model.safetensors")
    kind = {"gpt2": Gpt2, "llama": Llama}.get(cfg.get("model_type"))
    if kind is None:
        raise SystemExit(f"{model_dir}: model_type {cfg.get('model_type')!r} is not gpt2 or llama")
    model = kind(cfg, weights, backend, dtype)
    eos = cfg.get("eos_token_id")
    model.eos = eos[0] if isinstance(eos, list) else eos
    return model


# ---- the work --------------------------------------------------------------------------------

def score(model, ids):
    """Sum over records of -log p(x_t | x_<t), t = 1..n-1 (nats); ids [B, T], no padding."""
    logp = torch.log_softmax(model.head(model.body(ids)[:, :-1]), dim=-1)
    return -logp.gather(2, ids[:, 1:, None]).sum().item()


def score_padded(model, records):
    """Like score() for records of different lengths, right-padded into one batch. Only the
    rows that predict a real token go through the head."""
    longest = max(len(r) for r in records)
    ids = torch.zeros(len(records), longest, dtype=torch.long)
    wanted = torch.zeros(len(records), longest, dtype=torch.bool)
    for i, r in enumerate(records):
        ids[i, :len(r)] = torch.tensor(r)
        wanted[i, :len(r) - 1] = True
    hidden = model.body(ids)[wanted]  # [rows, C]
    targets = ids[:, 1:][wanted[:, :-1]]
    logp = torch.log_softmax(model.head(hidden), dim=-1)
    return -logp.gather(1, targets[:, None]).sum().item()


def corpus_batches(records, batch_size):
    """Batches as masque's runner forms them: windows of 16 * B records in input order, each
    stably sorted by length and cut into batches of B."""
    window = 16 * batch_size
    for w in range(0, len(records), window):
        part = sorted(records[w:w + window], key=len)
        for b in range(0, len(part), batch_size):
            yield part[b:b + batch_size]


def generate(model, prompt, new_tokens):
    """Greedy continuation of one prompt [1, T] with a KV cache; the end token is blocked."""
    caches = model.new_cache(1, prompt.shape[1] + new_tokens)
    logits = model.head(model.body(prompt, caches, 0)[:, -1:])
    out, start = [], prompt.shape[1]
    for step in range(new_tokens):
        if model.eos is not None:
            logits[..., model.eos] = float("-inf")
        token = logits.argmax(dim=-1)  # [1, 1]; ties go to the smallest id, as in masque
        out.append(int(token))
        if step + 1 == new_tokens:
            break
        logits = model.head(model.body(token, caches, start))
        start += 1
    return out


def read_ids(path):
    with open(path) as f:
        return [[int(t) for t in line.split()] for line in f if line.strip()]


def run_once(model, args, records, new_tokens):
    if args.task == "score":
        return {"nll": score(model, torch.tensor(records))}
    if args.task == "corpus":
        return {"nll": sum(score_padded(model, b) for b in corpus_batches(records, args.batch_size))}
    return {"generated": [generate(model, torch.tensor([r]), new_tokens) for r in records]}


def warm_up(model, args, records):
    """One short pass: the first calls of every op (a scoring batch, a few decoding steps, one
    corpus batch of each row bucket, where the tuned backend picks its products) are not
    timed."""
    if args.task == "corpus":
        seen = {}
        for b in corpus_batches(records, args.batch_size):
            seen.setdefault(row_bucket(len(b) * max(len(r) for r in b)), b)
        for b in seen.values():
            score_padded(model, b)
        return
    run_once(model, args, records, min(args.new_tokens, 8))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--task", choices=["score", "generate", "corpus"], required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--backend", choices=["tuned", "plain"], default="tuned")
    ap.add_argument("--dtype", choices=["f32", "bf16", "int8"], default="f32",
                    help="the linears' products: f32; bf16 (tuned only); int8: PyTorch's dynamic "
                         "quantization, per-channel symmetric qint8 weights, per-tensor uint8 "
                         "inputs quantized per call")
    args = ap.parse_args()
    if args.dtype == "bf16" and args.backend != "tuned":
        ap.error("--dtype bf16 needs --backend tuned")

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "int8": torch.qint8}[args.dtype]
    model = load_model(args.model, args.backend, dtype)
    load = time.perf_counter() - t0
    records = read_ids(args.ids)
    seconds = []
    with torch.inference_mode():
        warm_up(model, args, records)
        for _ in range(args.reps):
            t = time.perf_counter()
            result = run_once(model, args, records, args.new_tokens)
            seconds.append(time.perf_counter() - t)
    if args.dtype == "int8":
        result["int8_engines"] = int8_engine_counts(model)
    json.dump({"side": "torch", "task": args.task, "threads": args.threads,
               "backend": args.backend, "dtype": args.dtype, "load_seconds": load, "seconds": seconds,
               "records": len(records), "tokens": sum(len(r) for r in records), **result},
              sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
