#!/usr/bin/python3
"""The PyTorch peer of bench/generate: static batching of seeded sampling, as masque's static
runner batches (windows of 16 x B prompts sorted by length, cut into batches of B).

    torch_generate.py MODEL_DIR --ids PROMPTS --batch 32 --new-tokens 128 --end-tokens 1,2
        [--temperature 1.0 --top-p 0.95 --seed 1 --threads 1 --backend tuned]

Prints one JSON line: seconds and cpu_seconds (generation only, model load and an untimed
warm-up excluded), records, generated tokens. Each batch is left-padded (a key-padding mask hides the pads) and
decodes until its last row has produced an end token or the new-token limit; positions count
from the padded start, as a model called without position ids does. The model code is
bench/lm/torch_lm.py's (GPT-2 and Llama, KV cache, its tuned or plain products).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lm"))
import torch_lm  # noqa: E402

PAD_FROM = {"keys": None}  # [B] the first real column of each row, set per batch


def masked_attend(q, k, v, scale, start, backend):
    """torch_lm.attend with the left pads of each row hidden (a pad query sees itself)."""
    t, s = q.shape[2], k.shape[2]
    cols = torch.arange(s)
    allowed = cols[None, :] <= (start + torch.arange(t))[:, None]  # [t, s]
    first = PAD_FROM["keys"]
    allowed = allowed[None, :, :] & (cols[None, None, :] >= first[:, None, None])
    allowed = allowed | (cols[None, None, :] == (start + torch.arange(t))[None, :, None])
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), v)


torch_lm.attend = masked_attend


def batches(records, batch_size):
    window = 16 * batch_size
    for w in range(0, len(records), window):
        part = sorted(records[w:w + window], key=len)
        for b in range(0, len(part), batch_size):
            yield part[b:b + batch_size]


def sample(logits, temperature, top_p, generator):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
        sorted_p = sorted_p * keep
        choice = torch.multinomial(sorted_p, 1, generator=generator)
        return order.gather(1, choice)[:, 0]
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def generate_batch(model, prompts, args, ends, generator):
    longest = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), longest, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p):] = torch.tensor(p)
    PAD_FROM["keys"] = torch.tensor([longest - len(p) for p in prompts])
    caches = model.new_cache(len(prompts), longest + args.new_tokens)
    logits = model.head(model.body(ids, caches, 0)[:, -1:])[:, -1]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    generated, start = 0, longest
    for step in range(args.new_tokens):
        token = sample(logits, args.temperature, args.top_p, generator)
        generated += int((~done).sum())
        done |= torch.isin(token, ends)
        if bool(done.all()) or step + 1 == args.new_tokens:
            break
        logits = model.head(model.body(token[:, None], caches, start))[:, -1]
        start += 1
    return generated


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--end-tokens", required=True)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", choices=["tuned", "plain"], default="tuned")
    ap.add_argument("--limit", type=int, default=0, help="only the first N prompts (0: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    records = torch_lm.read_ids(args.ids)
    if args.limit:
        records = records[:args.limit]
    model = torch_lm.load_model(args.model, args.backend)
    ends = torch.tensor([int(t) for t in args.end_tokens.split(",")])
    generator = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        generate_batch(model, records[:args.batch], argparse.Namespace(
            new_tokens=4, temperature=args.temperature, top_p=args.top_p), ends, generator)
        begin, cpu = time.perf_counter(), time.process_time()
        generated = sum(generate_batch(model, b, args, ends, generator)
                        for b in batches(records, args.batch))
        seconds, cpu = time.perf_counter() - begin, time.process_time() - cpu
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "records": len(records),
                      "generated": generated}))


if __name__ == "__main__":
    main()
