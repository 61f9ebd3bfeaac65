#!/usr/bin/python3
"""PyTorch side of bench/train: the same training ops as ops_bench.cpp, and the comparison.

    torch_ops.py --threads N [--repeats R]          time PyTorch (TSV: case, threads, seconds)
    torch_ops.py --compare MASQUE_TSV TORCH_TSV      print the table (medians per case)

Attention is the Hugging Face eager path (heads split by view/transpose, an additive mask,
F.softmax, merged back), forward then backward into q, k and v; linear is F.linear with
weight and bias gradients, as nn.Linear trains. Gradients are reset to None between calls so
that PyTorch does not pay for accumulating them. Run with Debian's /usr/bin/python3.
"""
import argparse
import statistics
import sys
import time

B, T, H, D = 16, 128, 12, 64


def median_seconds(run, repeats):
    run()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def attention_cases(torch, repeats, threads):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, T, H * D, generator=g).requires_grad_() for _ in range(3))
    dout = torch.randn(B, T, H * D, generator=g)
    t = torch.arange(T)
    half = T // 2
    rank = torch.where(t < half, torch.zeros_like(t), t - half + 1)
    masks = {
        "bidirectional": torch.zeros(1, 1, T, T),
        "seq2seq": torch.where(rank[None, :] <= rank[:, None], 0.0, float("-inf"))[None, None],
    }
    for name, mask in masks.items():
        def forward():
            qh = q.view(B, T, H, D).transpose(1, 2)
            kh = k.view(B, T, H, D).transpose(1, 2)
            vh = v.view(B, T, H, D).transpose(1, 2)
            s = torch.matmul(qh, kh.transpose(-1, -2)) * (D ** -0.5) + mask
            p = F.softmax(s, dim=-1)
            return torch.matmul(p, vh).transpose(1, 2).reshape(B, T, H * D)

        def fwd_bwd():
            for x in (q, k, v):
                x.grad = None
            forward().backward(dout)

        print(f"attention_fwd_bwd_{name}\t{threads}\t{median_seconds(fwd_bwd, repeats):.6f}")
        print(f"attention_fwd_{name}\t{threads}\t{median_seconds(forward, repeats):.6f}")


def linear_cases(torch, repeats, threads):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(2)
    rows = B * T
    for fin, fout in [(768, 768), (768, 3072), (3072, 768)]:
        x = torch.randn(rows, fin, generator=g).requires_grad_()
        w = torch.randn(fout, fin, generator=g).requires_grad_()
        b = torch.randn(fout, generator=g).requires_grad_()
        dy = torch.randn(rows, fout, generator=g)

        def fwd_bwd():
            for p in (x, w, b):
                p.grad = None
            F.linear(x, w, b).backward(dy)

        print(f"linear_fwd_bwd_{fin}x{fout}\t{threads}\t{median_seconds(fwd_bwd, repeats):.6f}")


def read_tsv(path):
    times = {}
    with open(path) as f:
        for line in f:
            case, threads, seconds = line.split("\t")
            times.setdefault((case, int(threads)), []).append(float(seconds))
    return {key: statistics.median(v) for key, v in times.items()}


def compare(masque_tsv, torch_tsv):
    m, t = read_tsv(masque_tsv), read_tsv(torch_tsv)
    print(f"{'case':40} {'thr':>3} {'masque ms':>10} {'torch ms':>10} {'speed-up':>9}")
    for key in sorted(m):
        if key not in t:
            continue
        case, threads = key
        print(f"{case:40} {threads:>3} {m[key] * 1e3:10.2f} {t[key] * 1e3:10.2f} "
              f"{t[key] / m[key]:8.2f}x")
    for key in sorted(m):
        if key[0].startswith("linear_fwd_pack"):
            plain = m.get(("linear_fwd_plain" + key[0][len("linear_fwd_pack_per_step"):], key[1]))
            if plain:
                print(f"{key[0]:40} {key[1]:>3} {m[key] * 1e3:10.2f} (plain-layout forward "
                      f"{plain * 1e3:.2f} ms: packing per step {'loses' if m[key] > plain else 'wins'})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compare", nargs=2, metavar=("MASQUE_TSV", "TORCH_TSV"))
    a = ap.parse_args()
    if a.compare:
        compare(*a.compare)
        return
    import torch
    torch.set_num_threads(a.threads)
    attention_cases(torch, a.repeats, a.threads)
    linear_cases(torch, a.repeats, a.threads)


if __name__ == "__main__":
    sys.exit(main())
