#!/usr/bin/python3
"""masque's rnn-seq2seq against PyTorch (nn.LSTM / nn.GRU + the same attention) on the same
random-weight model and the same sources, in the same run: encoding and greedy decoding at
batch 1 and 32, one thread each. Called by run.sh:

    bench.py BENCH_RNN_BINARY WORK_DIR   (environment: STEPS, REPEATS, ROUNDS=1, THREADS=1,
                                           DTYPES="f32 bf16 int8"; writes
                                           WORK_DIR/results-THREADS.json)
    bench.py --best RESULTS.json...      each side at its best thread count over the runs

The model is tests/rnn/reference_rnn.py's Seq2Seq at a small-NMT size, saved as an rnn-seq2seq
folder; PyTorch runs it batched (packed sequences for the encoder, masked attention) in float32,
for masque's bf16 column in bfloat16 (the whole model cast, as `model.to(torch.bfloat16)`), and
for its int8 column dynamically quantized (`torch.quantization.quantize_dynamic` of every
nn.LSTM / nn.GRU / nn.Linear to qint8: int8 weights, activations quantized per call).
"""
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/rnn"))
import reference_rnn as ref  # noqa: E402

SOURCES, MIN_LEN, MAX_LEN = 32, 10, 30
STEPS = int(os.environ.get("STEPS", "20"))
REPEATS = int(os.environ.get("REPEATS", "3"))
# Rounds of both sides, alternating which goes first; a cell's ratio is the median of its
# rounds' ratios (each round's two sides saw the same machine), its times the medians.
ROUNDS = int(os.environ.get("ROUNDS", "1"))
THREADS = int(os.environ.get("THREADS", "1"))  # each side's threads
BATCH_SIZES = [1, 32]
DTYPES = os.environ.get("DTYPES", "f32 bf16 int8").split()  # masque's matmul_dtype, f32 first


def bench_config(cell):
    c = ref.config_of("bench", dict(cell=cell, attention="bahdanau"))
    c.update(source_vocab_size=8000, target_vocab_size=8000, embedding_size=256,
             encoder_layers=2, encoder_hidden_size=256, decoder_layers=2,
             decoder_hidden_size=512, attention_size=512)
    return c


TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "int8": torch.qint8}


class Peer:
    """The README's model, batched, in `dtype`."""

    def __init__(self, model, dtype):
        if dtype == torch.qint8:
            self.m = torch.quantization.quantize_dynamic(
                model.float().eval(), {torch.nn.LSTM, torch.nn.GRU, torch.nn.Linear}, dtype)
        else:
            self.m = model.to(dtype).eval()
        self.c = model.c

    def encode(self, sources):
        m, c = self.m, self.c
        lengths = torch.tensor([len(s) for s in sources])
        padded = pad_sequence([torch.tensor(s) for s in sources], batch_first=True)
        x = m.encoder.embed_tokens(padded)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, final = m.encoder.rnn(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True)
        h_n = final[0] if c["cell"] == "lstm" else final
        top = torch.cat([h_n[-2], h_n[-1]], dim=1)
        b, layers, hd = len(sources), c["decoder_layers"], c["decoder_hidden_size"]
        h0 = torch.tanh(m.bridge(top)).view(b, layers, hd).transpose(0, 1).contiguous()
        state = (h0, torch.zeros_like(h0)) if c["cell"] == "lstm" else h0
        keys = m.decoder.attention.key_proj(memory)
        pads = torch.arange(memory.shape[1])[None, :] >= lengths[:, None]
        return memory, keys, pads, state, torch.zeros(b, hd, dtype=memory.dtype)

    def step(self, memory, keys, pads, state, feed, tokens):
        m = self.m
        att = m.decoder.attention
        x = torch.cat([m.decoder.embed_tokens(tokens), feed], dim=1)
        out, state = m.decoder.rnn(x[:, None], state)
        s = out[:, 0]
        scores = att.v(torch.tanh(att.query_proj(s)[:, None] + keys)).squeeze(-1)
        alpha = torch.softmax(scores.masked_fill(pads, float("-inf")), dim=1)
        context = torch.bmm(alpha[:, None], memory)[:, 0]
        a = torch.tanh(att.out_proj(torch.cat([context, s], dim=1)))
        return m.generator(a).argmax(dim=1), state, a


@torch.inference_mode()
def torch_run(peer, sources, batch_size, start):
    encode_ms = decode_ms = 0.0
    tokens_out = []
    for first in range(0, len(sources), batch_size):
        rows = sources[first:first + batch_size]
        t = time.perf_counter()
        memory, keys, pads, state, feed = peer.encode(rows)
        encode_ms += (time.perf_counter() - t) * 1e3
        tokens = torch.full((len(rows),), start, dtype=torch.long)
        out = []
        t = time.perf_counter()
        for _ in range(STEPS):
            tokens, state, feed = peer.step(memory, keys, pads, state, feed, tokens)
            out.append(tokens)
        decode_ms += (time.perf_counter() - t) * 1e3
        tokens_out += torch.stack(out, dim=1).tolist()
    return encode_ms, decode_ms, tokens_out


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor()


def run_masque(binary, folder, work, dtype):
    """bench_rnn's results at one matmul_dtype, or None where the CPU cannot run it."""
    done = subprocess.run([binary, folder, os.path.join(work, "input.json"), dtype],
                          capture_output=True, text=True)
    if done.returncode != 0:
        if dtype == "f32":
            sys.exit(done.stderr)
        print(f"masque {dtype}: not run ({done.stderr.strip().splitlines()[-1]})")
        return None
    return json.loads(done.stdout)["results"]


def torch_times(peers, sources, start):
    """{(dtype, batch index): (encode_ms, decode_ms, tokens)}: the min of REPEATS runs."""
    out = {}
    for i, b in enumerate(BATCH_SIZES):
        for d, peer in peers.items():
            runs = [torch_run(peer, sources, b, start) for _ in range(REPEATS)]
            out[d, i] = (min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2])
    return out


def main():
    binary, work = sys.argv[1], sys.argv[2]
    torch.set_num_threads(THREADS)
    rng = random.Random(7)
    print(f"CPU: {cpu_name()}; PyTorch {torch.__version__}, {THREADS} thread(s); "
          f"masque {THREADS} thread(s)")
    rounds = (f"medians of {ROUNDS} rounds (each the min of {REPEATS} runs; ratio: the median "
              f"of the rounds' ratios)" if ROUNDS > 1 else f"min of {REPEATS} runs")
    print(f"{SOURCES} sources of {MIN_LEN}-{MAX_LEN} tokens, {STEPS} greedy steps each; "
          f"times are totals over all sources, {rounds}; each dtype column: "
          f"PyTorch and masque (matmul_dtype) in {' and '.join(DTYPES)}; sequences compared "
          f"with PyTorch float32's")
    print(f"{'model':<6} {'batch':>5} {'phase':<7} "
          + " ".join(f"{'torch ' + d + ' ms':>14} {'masque ' + d + ' ms':>15} {'ratio':>7}"
                     for d in DTYPES))
    worst, rows = {}, []
    for cell in ("lstm", "gru"):
        c = bench_config(cell)
        folder = os.path.join(work, cell)
        os.makedirs(folder, exist_ok=True)
        model = ref.make_model(c, 99)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f)
        ref.write_safetensors(os.path.join(folder, "model.safetensors"), model.state_dict())
        sources = [[rng.randrange(4, c["source_vocab_size"])
                    for _ in range(rng.randint(MIN_LEN, MAX_LEN))] for _ in range(SOURCES)]
        with open(os.path.join(work, "input.json"), "w") as f:
            json.dump({"batch_sizes": BATCH_SIZES, "sources": sources, "steps": STEPS,
                       "repeats": REPEATS, "threads": THREADS}, f)
        masque = {d: run_masque(binary, folder, work, d) for d in DTYPES}
        dtypes = [d for d in DTYPES if masque[d] is not None]
        peers = {d: Peer(ref.make_model(c, 99), TORCH_DTYPES[d]) for d in dtypes}
        ours_by_round, theirs_by_round = [masque], []
        for r in range(ROUNDS):
            if r % 2 == 1:  # torch first in odd rounds
                theirs_by_round.append(torch_times(peers, sources, c["decoder_start_token_id"]))
            if r > 0:
                ours_by_round.append({d: run_masque(binary, folder, work, d) for d in dtypes})
            if r % 2 == 0:
                theirs_by_round.append(torch_times(peers, sources, c["decoder_start_token_id"]))
        for i, b in enumerate(BATCH_SIZES):
            for p, phase in enumerate(("encode", "decode")):
                cells = []
                for d in DTYPES:
                    if masque[d] is None:
                        cells.append(f"{'-':>14} {'-':>15} {'-':>7}")
                        continue
                    ours = [o[d][i][phase + "_ms"] for o in ours_by_round]
                    peer = [t[d, i][p] for t in theirs_by_round]
                    ratio = statistics.median(t / o for t, o in zip(peer, ours))
                    ours_ms, peer_ms = statistics.median(ours), statistics.median(peer)
                    rows.append({"model": cell, "batch": b, "phase": phase, "dtype": d,
                                 "threads": THREADS, "torch_ms": peer_ms, "masque_ms": ours_ms,
                                 "ratio": ratio, "rounds": ROUNDS})
                    worst[d] = min(worst.get(d, float("inf")), ratio)
                    cells.append(f"{peer_ms:>14.2f} {ours_ms:>15.2f} {ratio:>6.2f}x")
                print(f"{cell:<6} {b:>5} {phase:<7} " + " ".join(cells))
            reference = theirs_by_round[0][dtypes[0], i][2]  # float32's, the first dtype
            same = [f"{d} {sum(x == y for x, y in zip(masque[d][i]['tokens'], reference))}"
                    f"/{len(sources)}" for d in dtypes]
            print(f"{'':<6} {b:>5} greedy sequences identical to PyTorch's: {', '.join(same)}")
    for d, w in worst.items():
        print(f"worst ratio, PyTorch {d} / masque {d}: {w:.2f}x (target >= 2x)")
    with open(os.path.join(work, f"results-{THREADS}.json"), "w") as f:
        json.dump(rows, f)


def best_of(files):
    """Each side at its best thread count: per cell, the fastest run of each side."""
    cells = {}
    for name in files:
        with open(name) as f:
            for r in json.load(f):
                key = (r["model"], r["batch"], r["phase"], r["dtype"])
                best = cells.setdefault(key, {"torch": (float("inf"), 0),
                                              "masque": (float("inf"), 0)})
                for side in ("torch", "masque"):
                    best[side] = min(best[side], (r[side + "_ms"], r["threads"]))
    dtypes = list(dict.fromkeys(k[3] for k in cells))
    print("each side at its best thread count (ms, threads in brackets)")
    print(f"{'model':<6} {'batch':>5} {'phase':<7} "
          + " ".join(f"{'torch ' + d:>14} {'masque ' + d:>15} {'ratio':>7}" for d in dtypes))
    worst = {}
    for key in dict.fromkeys(k[:3] for k in cells):
        out = []
        for d in dtypes:
            (t, tn), (m, mn) = cells[key + (d,)]["torch"], cells[key + (d,)]["masque"]
            worst[d] = min(worst.get(d, float("inf")), t / m)
            out.append(f"{t:>10.2f} ({tn}) {m:>11.2f} ({mn}) {t / m:>6.2f}x")
        print(f"{key[0]:<6} {key[1]:>5} {key[2]:<7} " + " ".join(out))
    for d, w in worst.items():
        print(f"worst ratio, PyTorch {d} / masque {d}, each at its best: {w:.2f}x (target >= 2x)")


if __name__ == "__main__":
    if sys.argv[1] == "--best":
        best_of(sys.argv[2:])
    else:
        main()
