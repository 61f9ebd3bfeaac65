#!/usr/bin/python3
"""Float64 PyTorch autograd references for masque's training ops (tests/train).

    reference_ops.py OUTDIR      writes OUTDIR/<case>.json, one file per case

Plain torch (python3-torch) only, deterministic (fixed seeds). Inputs are drawn in float32 and
stored exactly (a float32 value is a double); every reference is computed in float64 with
autograd from the upstream definitions: torch.nn.functional for the ops, torch.optim.AdamW,
torch.nn.utils.clip_grad_norm_, and Hugging Face transformers' schedule formulas (as written in
transformers/optimization.py) driven through torch's LambdaLR. The attention mask is built from
the rule in core/include/masque/mask.hpp:

    allowed(i, j) = role[j] != pad && (i == j + off || (role[j] == content && rank[j] <= rank[i]))

with the query-side conditions of MaskView (attention.hpp): a padding query sees nothing,
cross-attention (no query arrays) sees every non-pad key, a dense mask replaces the rank clause.
JSON cannot hold -inf: a query that sees no key has a null log-sum-exp.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
PAD, CONTENT, QUERY = 0, 1, 2


def f32(*shape, gen, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).double()


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def write(outdir, name, case):
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(case, f)


# ---- linear ------------------------------------------------------------------------------------

def linear_cases(outdir):
    gen = torch.Generator().manual_seed(1)
    for name, rows, fin, fout, layout, bias in [
        ("linear_out_in", 37, 29, 23, "out_in", True),
        ("linear_in_out", 37, 29, 23, "in_out", True),
        ("linear_wide_nobias", 5, 64, 130, "out_in", False),
        ("linear_in_out_one_row", 1, 17, 9, "in_out", False),
    ]:
        x = f32(rows, fin, gen=gen).requires_grad_()
        wshape = (fout, fin) if layout == "out_in" else (fin, fout)
        w = f32(*wshape, gen=gen, scale=0.2).requires_grad_()
        b = f32(fout, gen=gen).requires_grad_() if bias else None
        y = F.linear(x, w if layout == "out_in" else w.t(), b)
        dy = f32(rows, fout, gen=gen)
        y.backward(dy)
        dw0 = f32(*wshape, gen=gen)  # gradients accumulate onto what is there
        db0 = f32(fout, gen=gen)
        case = dict(rows=rows, fin=fin, fout=fout, layout=layout, bias=bias, x=flat(x), w=flat(w),
                    dy=flat(dy), y=flat(y), dx=flat(x.grad), dw0=flat(dw0),
                    dw=flat(dw0 + w.grad))
        if bias:
            case.update(b=flat(b), db0=flat(db0), db=flat(db0 + b.grad))
        write(outdir, name, case)


# ---- attention ---------------------------------------------------------------------------------

def allowed_matrix(L):
    B, Q, K = L["batch"], L["q_len"], L["k_len"]
    a = torch.zeros(B, Q, K, dtype=torch.bool)
    for b in range(B):
        for i in range(Q):
            for j in range(K):
                kr = L["key_role"][b][j]
                if kr == PAD:
                    continue
                if L["query_role"] is None:
                    a[b, i, j] = True
                    continue
                if L["query_role"][b][i] == PAD:
                    continue
                if L["dense"] is not None:
                    a[b, i, j] = L["dense"][b][i][j] != 0
                    continue
                a[b, i, j] = (j == i + L["self_offset"]) or (
                    kr == CONTENT and L["key_rank"][b][j] <= L["query_rank"][b][i])
    return a


def self_layout(roles, ranks, dense=None):
    return dict(batch=len(roles), q_len=len(roles[0]), k_len=len(roles[0]), key_role=roles,
                key_rank=ranks, query_role=roles, query_rank=ranks, self_offset=0, dense=dense)


def padded(lengths, T, rank_of):
    roles = [[CONTENT if t < n else PAD for t in range(T)] for n in lengths]
    ranks = [[rank_of(b, t) if t < n else 0 for t in range(T)] for b, n in enumerate(lengths)]
    return roles, ranks


def attention_layouts(gen):
    out = {}
    roles, ranks = padded([7, 4], 7, lambda b, t: 0)
    out["attn_bidirectional_pads"] = (self_layout(roles, ranks), 4, 4, 8)
    roles, ranks = padded([13, 9, 1], 13, lambda b, t: t)
    out["attn_causal_gqa"] = (self_layout(roles, ranks), 4, 2, 16)
    # UniLM: [CLS] source [SEP] | target [SEP]; rank = cumulative sum of segment ids.
    segs = [[0] * 5 + [1] * 6, [0] * 3 + [1] * 4 + [0] * 0]
    roles, ranks = [], []
    for s in segs:
        r, acc = [], 0
        for x in s:
            acc += x
            r.append(acc)
        roles.append([CONTENT] * len(s) + [PAD] * (11 - len(s)))
        ranks.append(r + [0] * (11 - len(s)))
    out["attn_seq2seq"] = (self_layout(roles, ranks), 3, 3, 8)
    # Permutation with a query stream: 6 content tokens ranked by a random order, then 3 query
    # tokens each ranked just below the position it predicts (it sees the content before it).
    roles, ranks = [], []
    for b in range(2):
        perm = torch.randperm(6, generator=gen).tolist()
        rank = [0] * 6
        for idx, pos in enumerate(perm):
            rank[pos] = idx
        targets = perm[3:]
        roles.append([CONTENT] * 6 + [QUERY] * 3 + [PAD] * b)
        ranks.append(rank + [rank[p] - 1 for p in targets] + [0] * b)
        if b == 0:
            roles[0] += [PAD]
            ranks[0] += [0]
    for r in roles:
        assert len(r) == 10
    out["attn_permutation_query"] = (self_layout(roles, ranks), 2, 1, 8)
    # Dense mask: random, with some queries that see nothing (zero output).
    T = 8
    roles, ranks = padded([8, 6], T, lambda b, t: 0)
    dense = (torch.rand(2, T, T, generator=gen) < 0.4).int()
    dense[0, 3, :] = 0
    out["attn_dense"] = (self_layout(roles, ranks, dense.tolist()), 2, 2, 8)
    # Cross-attention with padded keys and multi-query heads.
    kroles, kranks = padded([9, 5], 9, lambda b, t: 0)
    out["attn_cross_mqa"] = (dict(batch=2, q_len=6, k_len=9, key_role=kroles, key_rank=kranks,
                                  query_role=None, query_rank=None, self_offset=0, dense=None),
                             4, 1, 8)
    # More queries than one tile (128 rows), causal with a self_offset (a decoding step against
    # 5 cached keys ranked below every query).
    Q, K = 140, 145
    kroles = [[CONTENT] * K]
    kranks = [[0] * 5 + list(range(1, Q + 1))]
    out["attn_long_causal_offset"] = (dict(
        batch=1, q_len=Q, k_len=K, key_role=kroles, key_rank=kranks, query_role=[[CONTENT] * Q],
        query_rank=[list(range(1, Q + 1))], self_offset=5, dense=None), 2, 2, 4)
    return out


def attention_cases(outdir):
    gen = torch.Generator().manual_seed(2)
    for name, (L, H, Hkv, d) in attention_layouts(gen).items():
        B, Q, K = L["batch"], L["q_len"], L["k_len"]
        scale = 1.0 / math.sqrt(d)
        q = f32(B, Q, H * d, gen=gen).requires_grad_()
        k = f32(B, K, Hkv * d, gen=gen).requires_grad_()
        v = f32(B, K, Hkv * d, gen=gen).requires_grad_()
        dout = f32(B, Q, H * d, gen=gen)
        allowed = allowed_matrix(L)  # [B, Q, K]
        qh = q.view(B, Q, H, d).transpose(1, 2)
        rep = H // Hkv
        kh = k.view(B, K, Hkv, d).transpose(1, 2).repeat_interleave(rep, dim=1)
        vh = v.view(B, K, Hkv, d).transpose(1, 2).repeat_interleave(rep, dim=1)
        s = scale * qh @ kh.transpose(-1, -2)  # [B, H, Q, K]
        m = allowed[:, None, :, :]
        any_key = m.any(-1, keepdim=True)
        p = torch.softmax(s.masked_fill(~m, -1e300), -1) * any_key
        o = (p @ vh).transpose(1, 2).reshape(B, Q, H * d)
        o.backward(dout)
        lse = torch.logsumexp(s.masked_fill(~m, -math.inf), -1)  # [B, H, Q]
        lse_list = [None if math.isinf(x) else float(x) for x in lse.detach().reshape(-1).tolist()]
        case = dict(L, heads=H, kv_heads=Hkv, head_dim=d, scale=scale, q=flat(q), k=flat(k),
                    v=flat(v), dout=flat(dout), out=flat(o), lse=lse_list, dq=flat(q.grad),
                    dk=flat(k.grad), dv=flat(v.grad))
        write(outdir, name, case)


# ---- norms, activations, rotary, embeddings ---------------------------------------------------

def norm_cases(outdir):
    gen = torch.Generator().manual_seed(3)
    rows, n = 11, 37
    for name, kind, bias in [("layer_norm", "ln", True), ("layer_norm_nobias", "ln", False),
                             ("rms_norm", "rms", False)]:
        x = (f32(rows, n, gen=gen) * 3 + 0.5).requires_grad_()
        w = (1 + f32(n, gen=gen, scale=0.3)).requires_grad_()
        b = f32(n, gen=gen).requires_grad_() if bias else None
        eps = 1e-5 if kind == "ln" else 1e-6
        if kind == "ln":
            y = F.layer_norm(x, (n,), w, b, eps)
        else:  # Llama's RMSNorm: x / sqrt(mean(x^2) + eps) * w
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        dy = f32(rows, n, gen=gen)
        y.backward(dy)
        dw0, db0 = f32(n, gen=gen), f32(n, gen=gen)
        case = dict(rows=rows, n=n, eps=eps, x=flat(x), w=flat(w), dy=flat(dy), dx=flat(x.grad),
                    dw0=flat(dw0), dw=flat(dw0 + w.grad))
        if bias:
            case.update(b=flat(b), db0=flat(db0), db=flat(db0 + b.grad))
        write(outdir, name, case)


def activation_cases(outdir):
    gen = torch.Generator().manual_seed(4)
    x0 = torch.cat([f32(200, gen=gen, scale=3.0),
                    torch.tensor([0.0, -0.0, 1e-4, -1e-4, 5.0, -5.0, 9.5, -9.5, 20.0, -20.0])])
    dy = f32(x0.numel(), gen=gen)
    acts = {
        "relu": F.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu,
    }
    case = dict(x=flat(x0), dy=flat(dy))
    for name, fn in acts.items():
        x = x0.clone().requires_grad_()
        fn(x).backward(dy)
        case[name] = flat(x.grad)
    # Gated MLP: silu(gate) * up.
    g = f32(7, 24, gen=gen, scale=2.0).requires_grad_()
    u = f32(7, 24, gen=gen).requires_grad_()
    dout = f32(7, 24, gen=gen)
    (F.silu(g) * u).backward(dout)
    case.update(gate=flat(g), up=flat(u), dout=flat(dout), dgate=flat(g.grad), dup=flat(u.grad))
    write(outdir, "activations", case)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary_cases(outdir):
    gen = torch.Generator().manual_seed(5)
    rows, heads, d, rd, theta = 9, 3, 8, 6, 10000.0
    positions = [0, 1, 2, 7, 15, 16, 17, 40, 3]  # past the table (16) too
    x = f32(rows, heads, d, gen=gen).requires_grad_()
    inv_freq = 1.0 / theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    freqs = torch.tensor(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    cos, sin = emb.cos(), emb.sin()
    xr, xp = x[..., :rd], x[..., rd:]
    y = torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)
    dy = f32(rows, heads, d, gen=gen)
    y.backward(dy)
    write(outdir, "rotary", dict(rows=rows, heads=heads, head_dim=d, rotary_dim=rd, theta=theta,
                                 max_positions=16, positions=positions, x=flat(x), y=flat(y),
                                 dy=flat(dy), dx=flat(x.grad)))


def embedding_cases(outdir):
    gen = torch.Generator().manual_seed(6)
    vocab, dim = 13, 10
    ids = [3, 0, 12, 3, 3, 7, 0]
    table = f32(vocab, dim, gen=gen).requires_grad_()
    dy = f32(len(ids), dim, gen=gen)
    F.embedding(torch.tensor(ids), table).backward(dy)
    d0 = f32(vocab, dim, gen=gen)
    write(outdir, "embedding", dict(vocab=vocab, dim=dim, ids=ids, dy=flat(dy), d0=flat(d0),
                                    dtable=flat(d0 + table.grad)))


# ---- loss, optimizer, clipping, schedules ------------------------------------------------------

def loss_cases(outdir):
    gen = torch.Generator().manual_seed(7)
    for name, rows, vocab, scale, smoothing, extra in [
        ("ce_plain", 9, 31, 2.0, 0.0, 0), ("ce_smoothing", 9, 31, 2.0, 0.1, 5),
        ("ce_large_logits", 4, 1000, 30.0, 0.2, 0)]:
        logits = f32(rows, vocab, gen=gen, scale=scale).requires_grad_()
        targets = torch.randint(0, vocab, (rows,), generator=gen)
        targets[1] = -100
        if rows > 5:
            targets[5] = -100
        counted = int((targets != -100).sum())
        count = counted + extra  # the step's total over micro-batches
        total = F.cross_entropy(logits, targets, ignore_index=-100, label_smoothing=smoothing,
                                reduction="sum")
        loss = total / count
        loss.backward()
        write(outdir, name, dict(rows=rows, vocab=vocab, smoothing=smoothing, count=count,
                                 counted=counted, targets=targets.tolist(), logits=flat(logits),
                                 loss_sum=float(total), loss=float(loss),
                                 dlogits=flat(logits.grad)))


def hf_linear(s, w, t):  # transformers' _get_linear_schedule_with_warmup_lr_lambda
    if s < w:
        return float(s) / float(max(1, w))
    return max(0.0, float(t - s) / float(max(1, t - w)))


def hf_cosine(s, w, t, cycles=0.5):  # _get_cosine_schedule_with_warmup_lr_lambda
    if s < w:
        return float(s) / float(max(1, w))
    progress = float(s - w) / float(max(1, t - w))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))


def hf_constant(s, w):  # _get_constant_schedule_with_warmup_lr_lambda
    if s < w:
        return float(s) / float(max(1.0, w))
    return 1.0


def lrs_seen_by_optimizer(base_lr, fn, steps):
    """The lr each optimizer.step() uses under LambdaLR stepped after it (the HF Trainer's order)."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def schedule_cases(outdir):
    cases = []
    for kind, w, t in [("linear", 3, 10), ("linear", 0, 7), ("cosine", 4, 12), ("cosine", 0, 5),
                       ("constant", 3, 8), ("constant", 0, 4)]:
        if kind == "linear":
            fn = lambda s, w=w, t=t: hf_linear(s, w, t)
        elif kind == "cosine":
            fn = lambda s, w=w, t=t: hf_cosine(s, w, t)
        else:
            fn = lambda s, w=w: hf_constant(s, w)
        cases.append(dict(kind=kind, warmup=w, total=t, base_lr=3e-4,
                          lrs=lrs_seen_by_optimizer(3e-4, fn, t + 2)))
    write(outdir, "schedules", dict(cases=cases))


def adamw_cases(outdir):
    gen = torch.Generator().manual_seed(8)
    w = torch.nn.Parameter(f32(5, 7, gen=gen))  # decayed (a matrix)
    b = torch.nn.Parameter(f32(7, gen=gen))     # not decayed (a bias)
    init = dict(w=flat(w), b=flat(b))
    opt = torch.optim.AdamW([{"params": [w], "weight_decay": 0.1},
                             {"params": [b], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.98), eps=1e-6)
    steps = []
    for step in range(6):
        lr = 1e-3 * (step + 1) / 6
        for g in opt.param_groups:
            g["lr"] = lr
        gw, gb = f32(5, 7, gen=gen), f32(7, gen=gen, scale=1e-3 if step % 2 else 1.0)
        w.grad, b.grad = gw, gb
        opt.step()
        steps.append(dict(lr=lr, gw=flat(gw), gb=flat(gb), w=flat(w), b=flat(b)))
    state = opt.state
    write(outdir, "adamw", dict(init=init, beta1=0.9, beta2=0.98, eps=1e-6, weight_decay=0.1,
                                steps=steps, m_w=flat(state[w]["exp_avg"]),
                                v_w=flat(state[w]["exp_avg_sq"]), m_b=flat(state[b]["exp_avg"]),
                                v_b=flat(state[b]["exp_avg_sq"])))


def clip_cases(outdir):
    gen = torch.Generator().manual_seed(9)
    cases = []
    for max_norm in [1.0, 100.0]:
        grads = [f32(4, 5, gen=gen), f32(3, gen=gen), f32(11, gen=gen, scale=2.0)]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        cases.append(dict(max_norm=max_norm, grads=[flat(g) for g in grads], norm=float(norm),
                          clipped=[flat(p.grad) for p in params]))
    write(outdir, "clip", dict(cases=cases))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: reference_ops.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    for make in (linear_cases, attention_cases, norm_cases, activation_cases, rotary_cases,
                 embedding_cases, loss_cases, schedule_cases, adamw_cases, clip_cases):
        make(outdir)


if __name__ == "__main__":
    main()
