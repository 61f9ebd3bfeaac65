#!/usr/bin/python3
"""PyTorch side of bench_train_model (model_bench.cpp): the same three models, the same batches,
the same step (forward, softmax cross-entropy over the predicted rows, backward,
clip_grad_norm_(1.0), torch.optim.AdamW(lr 1e-4, weight decay 0.01)), in plain f32 PyTorch as one
would write it: nn.Linear / nn.LayerNorm / nn.Embedding, Hugging Face's eager attention
(matmul, additive mask, softmax, matmul).

  torch_model.py --model bert-base|gpt2-small|g2p [--threads N] [--steps S] [--warmup W]
                 [--dtype f32|bf16]
  torch_model.py --compare MASQUE_TSV TORCH_TSV [--peak PEAK_TSV]     the tables of README.md

--dtype bf16 runs the forward under torch.autocast("cpu", dtype=torch.bfloat16) (the usual way to
train in bf16 on a CPU in PyTorch): f32 master weights, bf16 matmuls.

Prints the same tab-separated line as bench_train_model: model, dtype, threads, median seconds
per step (wall), median process CPU seconds per step, real input tokens per step, predicted tokens per step, model GFLOP per step, peak RSS
in KiB (ru_maxrss), first and last step's loss.
"""
import argparse
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

CONFIGS = {
    # gpt2, vocab, hidden, layers, heads, ffn, max_positions, batch, length (0: G2P lengths)
    "bert-base": (False, 30522, 768, 12, 12, 3072, 512, 16, 128),
    "gpt2-small": (True, 50257, 768, 12, 12, 3072, 1024, 8, 256),
    "g2p": (False, 80, 256, 4, 4, 1024, 64, 128, 0),
}


class LayerNorm(torch.nn.LayerNorm):
    """nn.LayerNorm in f32 whatever its input: torch 1.13's CPU autocast leaves layer_norm out
    of its lists and then refuses a bf16 input with f32 weights (a no-op in f32)."""

    def forward(self, x):
        return super().forward(x.float())


class Block(torch.nn.Module):
    def __init__(self, h, heads, ffn, pre_norm, eps, act):
        super().__init__()
        self.heads, self.pre_norm, self.act = heads, pre_norm, act
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.out = torch.nn.Linear(h, h)
        self.norm1 = LayerNorm(h, eps=eps)
        self.up = torch.nn.Linear(h, ffn)
        self.down = torch.nn.Linear(ffn, h)
        self.norm2 = LayerNorm(h, eps=eps)

    def attention(self, x, mask):
        b, t, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d).transpose(1, 2) for y in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(ctx.transpose(1, 2).reshape(b, t, h))

    def mlp(self, x):
        return self.down(F.gelu(self.up(x), approximate=self.act))

    def forward(self, x, mask):
        if self.pre_norm:
            x = x + self.attention(self.norm1(x), mask)
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attention(x, mask))
        return self.norm2(x + self.mlp(x))


class Model(torch.nn.Module):
    def __init__(self, gpt2, vocab, h, layers, heads, ffn, max_positions):
        super().__init__()
        self.gpt2 = gpt2
        eps = 1e-5 if gpt2 else 1e-12
        act = "tanh" if gpt2 else "none"
        self.tokens = torch.nn.Embedding(vocab, h)
        self.positions = torch.nn.Embedding(max_positions, h)
        if not gpt2:
            self.types = torch.nn.Embedding(2, h)
            self.embedding_norm = LayerNorm(h, eps=eps)
            self.transform = torch.nn.Linear(h, h)
            self.transform_norm = LayerNorm(h, eps=eps)
            self.head_bias = torch.nn.Parameter(torch.zeros(vocab))
        else:
            self.final_norm = LayerNorm(h, eps=eps)
        self.blocks = torch.nn.ModuleList(
            Block(h, heads, ffn, gpt2, eps, act) for _ in range(layers))
        for p in self.parameters():  # normal(0, 0.02) matrices and tables, zero biases, unit norms
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids, positions, types, mask, rows):
        x = self.tokens(ids) + self.positions(positions)
        if not self.gpt2:
            x = self.embedding_norm(x + self.types(types))
        for block in self.blocks:
            x = block(x, mask)
        x = x.reshape(-1, x.shape[-1])[rows]
        if self.gpt2:
            return F.linear(self.final_norm(x), self.tokens.weight)
        x = self.transform_norm(F.gelu(self.transform(x)))
        return F.linear(x, self.tokens.weight, self.head_bias)


def data_token(vocab, step, record, i):
    return 5 + (record * 131 + i * 71 + step * 17) % (vocab - 5)


def make_batch(cfg, step):
    """The batch of model_bench.cpp's make_batch: ids, positions, types, additive mask, rows,
    labels and the number of real tokens."""
    gpt2, vocab, _, _, _, _, _, batch, length = cfg
    records = []
    for r in range(batch):
        if gpt2:
            ids = [data_token(vocab, step, r, i) for i in range(length)]
            records.append((ids, [0] * length, list(range(length)), 0))
            continue
        src, tgt = (62, 63) if length else (5 + (r * 7 + step * 3) % 9, 4 + (r * 5 + step) % 7)
        ids = [1] + [data_token(vocab, step, r, i) for i in range(src)] + [2]
        first = len(ids) - 1
        n_src = len(ids)
        ids += [data_token(vocab, step, r, 1000 + i) for i in range(tgt)] + [2]
        types = [0] * n_src + [1] * (tgt + 1)
        ranks = [0] * n_src + list(range(1, tgt + 2))
        records.append((ids, types, ranks, first))
    t = max(len(rec[0]) for rec in records)
    ids = torch.zeros(batch, t, dtype=torch.long)
    types = torch.zeros(batch, t, dtype=torch.long)
    positions = torch.zeros(batch, t, dtype=torch.long)
    ranks = torch.zeros(batch, t, dtype=torch.long)
    valid = torch.zeros(batch, t, dtype=torch.bool)
    rows, labels, real = [], [], 0
    for r, (rid, rtypes, rranks, first) in enumerate(records):
        n = len(rid)
        ids[r, :n] = torch.tensor(rid)
        types[r, :n] = torch.tensor(rtypes)
        ranks[r, :n] = torch.tensor(rranks)
        positions[r, :n] = torch.arange(n)
        valid[r, :n] = True
        for p in range(first, n - 1):
            rows.append(r * t + p)
            labels.append(rid[p + 1])
        real += n
    allowed = (ranks[:, None, :] <= ranks[:, :, None]) & valid[:, None, :]
    allowed |= torch.eye(t, dtype=torch.bool)[None]  # pad queries see themselves (no NaN rows)
    mask = torch.zeros(batch, 1, t, t)
    mask.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)
    return (ids, positions, types, mask, torch.tensor(rows), torch.tensor(labels), real)


def step_flops(cfg, batch):
    gpt2, vocab, h, layers, _, ffn, _, _, _ = cfg
    ids, rows = batch[0], batch[4]
    n, t = ids.numel(), ids.shape[1]
    per_layer = 2.0 * n * (4 * h * h + 2 * h * ffn) + 4.0 * n * t * h
    head = 2.0 * len(rows) * ((0 if gpt2 else h * h) + h * vocab)
    return 3.0 * (layers * per_layer + head)


def read_tsv(path):
    """(model, dtype, threads) -> list of rows (wall, cpu, real, predicted, gflop, rss_kib)."""
    rows = {}
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 9:
                continue
            rows.setdefault((p[0], p[1], int(p[2])), []).append([float(x) for x in p[3:9]])
    return rows


def read_peak(path):
    """threads -> f32 FMA peak GFLOP/s, from bench_numerics --filter peak lines."""
    peak = {}
    if not path:
        return peak
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) >= 5 and p[0] == "peak":
                peak.setdefault(int(p[2]), []).append(float(p[4]))
    return {t: statistics.median(v) for t, v in peak.items()}


def compare(masque_tsv, torch_tsv, peak_tsv):
    ours, theirs, peak = read_tsv(masque_tsv), read_tsv(torch_tsv), read_peak(peak_tsv)
    med = lambda rows, i: statistics.median(r[i] for r in rows)
    print("| model | dtype | thr | masque tok/s | PyTorch tok/s | speed-up (wall) | "
          "speed-up (CPU time) | masque % peak | PyTorch % peak | masque peak RSS MiB | "
          "PyTorch peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(set(ours) | set(theirs), key=lambda k: (list(CONFIGS).index(k[0]), k[1], k[2])):
        m, t = ours.get(key), theirs.get(key)
        cells = []
        for rows in (m, t):
            cells.append(f"{med(rows, 2) / med(rows, 0):,.0f}" if rows else "-")
        ratio = f"{med(t, 0) / med(m, 0):.2f}x" if m and t else "-"
        cpu_ratio = f"{med(t, 1) / med(m, 1):.2f}x" if m and t else "-"
        pk = peak.get(key[2])
        frac = [f"{100 * med(r, 4) / med(r, 0) / pk:.0f}%" if r and pk else "-" for r in (m, t)]
        rss = [f"{med(r, 5) / 1024:,.0f}" if r else "-" for r in (m, t)]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {cells[0]} | {cells[1]} | {ratio} | {cpu_ratio} | "
              f"{frac[0]} | {frac[1]} | {rss[0]} | {rss[1]} |")
    for t, g in sorted(peak.items()):
        print(f"\nFMA peak measured in this run, {t} thread(s): {g:.1f} GFLOP/s", end="")
    print()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--compare":
        ap = argparse.ArgumentParser()
        ap.add_argument("--compare", nargs=2, metavar=("MASQUE_TSV", "TORCH_TSV"))
        ap.add_argument("--peak")
        a = ap.parse_args()
        return compare(a.compare[0], a.compare[1], a.peak)
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="g2p", choices=sorted(CONFIGS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cfg = CONFIGS[a.model]
    model = Model(*cfg[:7])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}], lr=1e-4)
    data = [make_batch(cfg, i) for i in range(4)]
    times, cpu, first, last = [], [], None, None
    for step in range(a.warmup + a.steps):
        ids, positions, types, mask, rows, labels, _ = data[step % len(data)]
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = model(ids, positions, types, mask, rows)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        first = loss.item() if first is None else first
        last = loss.item()
        if step >= a.warmup:
            times.append(t1 - t0)
            cpu.append(c1 - c0)
    times.sort()
    cpu.sort()
    real = sum(b[6] for b in data) / len(data)
    predicted = sum(len(b[5]) for b in data) / len(data)
    flops = sum(step_flops(cfg, b) for b in data) / len(data)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{a.model}\t{a.dtype}\t{a.threads}\t{times[len(times) // 2]:.6f}\t"
          f"{cpu[len(cpu) // 2]:.6f}\t{real:.1f}\t"
          f"{predicted:.1f}\t{flops / 1e9:.3f}\t{rss}\t{first:.6f}\t{last:.6f}")


if __name__ == "__main__":
    main()
