#!/usr/bin/python3
"""Language-model benchmark driver: masque and PyTorch on the same work, in the same run.

    bench.py --build BUILD_DIR --scratch DIR [--rounds 3] [--reps 4] [--only score,generate,corpus]

Run through run.sh, which documents the method. Every measurement alternates masque and
PyTorch within each round (both see the same machine load) and quotes the median over rounds.
Prints markdown tables and writes every raw measurement to DIR/results.json.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's python3 with python3-torch and python3-numpy
STORIES = os.path.join(ROOT, "..", "shared", "models", "stories260k")
GPT2_TOKENIZER = os.path.join(ROOT, "..", "shared", "tokenizers", "gpt2")

SCORE_RECORDS, SCORE_LENGTH = 8, 256
PROMPT_LENGTH, NEW_TOKENS = 32, 128
STORY_RECORDS, GPT2_CORPUS_RECORDS = 4000, 128


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, stdout=None):
    subprocess.run(cmd, check=True, stdout=stdout)


# ---- setup -----------------------------------------------------------------------------------

def setup(a):
    """Model, inputs and pipelines in the scratch folder (made once; all deterministic)."""
    s = a.scratch
    os.makedirs(s, exist_ok=True)
    model = os.path.join(s, "gpt2-small")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        log("writing the random-weight GPT-2-small model ...")
        sh([PYTHON, os.path.join(HERE, "make_model.py"), model])
    inputs = {
        "score.ids": ["ids", "--records", str(SCORE_RECORDS), "--length", str(SCORE_LENGTH),
                      "--seed", "1"],
        "prompt.ids": ["ids", "--records", "1", "--length", str(PROMPT_LENGTH), "--seed", "3"],
        "stories.txt": ["stories", "--records", str(STORY_RECORDS), "--seed", "2"],
    }
    for name, args in inputs.items():
        sh([PYTHON, os.path.join(HERE, "make_inputs.py"), args[0], os.path.join(s, name)] + args[1:])
    with open(os.path.join(s, "stories.txt")) as f:
        stories = f.readlines()
    with open(os.path.join(s, "stories-gpt2.txt"), "w") as f:
        f.writelines(stories[:GPT2_CORPUS_RECORDS])
    pipelines = {
        "gpt2-score.yaml": "task: lm-score\nmodel: {plugin: gpt2, path: gpt2-small}\n"
                           "mask: {plugin: causal}\n",
        "gpt2-generate.yaml": "task: lm-generate\nmodel: {plugin: gpt2, path: gpt2-small}\n"
                              "mask: {plugin: causal}\ndecoder: {plugin: greedy}\n",
        "gpt2-score-text.yaml": "task: lm-score\nmodel: {plugin: gpt2, path: gpt2-small}\n"
                                f"tokenizer: {{plugin: bpe, path: {GPT2_TOKENIZER}}}\n"
                                "mask: {plugin: causal}\n",
    }
    for name, text in pipelines.items():
        with open(os.path.join(s, name), "w") as f:
            f.write(text)
    # The peer reads the ids masque's tokenizers produce (tokenization is not timed for it).
    tokenize(a, os.path.join(ROOT, "pipelines", "lm-score.yaml"), "stories.txt", "stories.ids")
    tokenize(a, os.path.join(s, "gpt2-score-text.yaml"), "stories-gpt2.txt", "stories-gpt2.ids")
    return model


def tokenize(a, pipeline, text, ids):
    out = subprocess.run([masque(a), "tokenize", pipeline, "-q", "-i", os.path.join(a.scratch, text)],
                         check=True, capture_output=True, text=True).stdout
    with open(os.path.join(a.scratch, ids), "w") as f:
        for line in out.splitlines():
            f.write(" ".join(map(str, json.loads(line)["ids"])) + "\n")


def masque(a):
    return os.path.join(a.build, "bin", "masque")


def repeated(a, name, times):
    """The input file `name` repeated `times` times (several batches of the same work)."""
    path = os.path.join(a.scratch, f"{times}x-{name}")
    with open(os.path.join(a.scratch, name)) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text * times)
    return path


# ---- running the two sides -------------------------------------------------------------------

def run_masque(a, pipeline, input_path, options):
    """One masque process: (corpus seconds from --summary, process wall seconds, output lines)."""
    summary = os.path.join(a.scratch, "summary.json")
    cmd = [masque(a), "run", pipeline, "-i", input_path, "-q", "--summary", summary] + options
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    with open(summary) as f:
        seconds = json.load(f)["seconds"]
    return seconds, wall, [json.loads(l) for l in out.splitlines()], " ".join(cmd)


# The PyTorch peers: "tuned" (the fastest products this PyTorch offers, see torch_lm.py) and
# "plain" (the straightforward torch code the issue names), both on OpenBLAS when --openblas
# gives its directory, else on the BLAS the system has.
PEERS = ("tuned", "plain")


def torch_env(a, threads, peer):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if a.openblas:
        env["LD_LIBRARY_PATH"] = a.openblas + (":" + env["LD_LIBRARY_PATH"]
                                               if env.get("LD_LIBRARY_PATH") else "")
        if peer == "tuned" and threads > 1:
            # OpenBLAS's threads and PyTorch's OpenMP team otherwise spin against each other
            # on two vCPUs (one-row products: 63 ms/token instead of 20).
            env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def run_torch(a, model, task, ids, threads, reps, extra=(), peer="tuned"):
    cmd = [PYTHON, os.path.join(HERE, "torch_lm.py"), model, "--task", task, "--ids", ids,
           "--threads", str(threads), "--reps", str(reps), "--backend", peer] + list(extra)
    env = torch_env(a, threads, peer)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    settings = " ".join(f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                   "OMP_WAIT_POLICY", "LD_LIBRARY_PATH") if k in env)
    return json.loads(out), f"{settings} {' '.join(cmd)}"


DTYPES = ("f32", "bf16", "int8")


def cpu_has_bf16_matmuls():
    """oneDNN 2.6 has bf16 matmuls from AVX-512 (avx512_core) on; elsewhere masque refuses them."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    return all(flag in flags for flag in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def peers_for(dtype):
    # The plain code has no bf16 linears. int8 runs on both: PyTorch's dynamic quantization
    # (torch_lm.py --dtype int8), plain on the default quantized engine, tuned on the faster
    # engine per layer and row count.
    return ("tuned",) if dtype == "bf16" else PEERS


def engines(t):
    """The int8 engines the PyTorch side ran (row bucket -> {engine: linears}), if any."""
    return {"int8_engines": t["int8_engines"]} if "int8_engines" in t else {}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ---- yardsticks: the CPU's own limits, measured in the same run (issue 23) -------------------

def gpt2_shape(model):
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    return c["n_layer"], c["n_embd"], c.get("n_inner") or 4 * c["n_embd"], c["vocab_size"]


def score_flops_per_token(model):
    """Matmul FLOPs per scored token at SCORE_LENGTH: q/k/v/out and the MLP per layer, the tied
    output head, and causal attention (scores and weighted values over the T/2 earlier
    positions on average)."""
    layers, d, ffn, vocab = gpt2_shape(model)
    return 2 * (layers * (4 * d * d + 2 * d * ffn + 2 * d * SCORE_LENGTH // 2) + d * vocab)


def f32_weight_bytes(model):
    """Bytes of parameters a decoding step reads in f32 (every tensor of the safetensors file)."""
    with open(os.path.join(model, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items()
               if k != "__metadata__")


def bench_yardsticks(a, results):
    """bench_numerics' f32 FMA peak (GFLOP/s) and memory read bandwidth (GB/s) on 1 and 2
    threads: what the percentages of the score and generate tables are taken against."""
    tool = os.path.join(a.build, "bin", "bench_numerics")
    if not os.access(tool, os.X_OK):
        log(f"bench: {tool} not built: no % of peak / bandwidth columns")
        return
    for threads in (1, 2):
        for kind in ("peak", "bandwidth"):
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            out = subprocess.run([tool, "--threads", str(threads), "--filter", kind], env=env,
                                 check=True, capture_output=True, text=True).stdout
            for line in out.splitlines():
                f = line.split("\t")
                if f[0] == kind:
                    results.append({"bench": "yardstick", "kind": kind, "threads": threads,
                                    "value": float(f[4])})


def yardstick(results, kind, threads):
    return median([r["value"] for r in select(results, bench="yardstick", kind=kind,
                                              threads=threads)])


# ---- issue 5 (a): scoring 8 x 256 ------------------------------------------------------------

MASQUE_CONFIGS = {  # threads -> {label: options}
    1: {"--threads 1": ["--threads", "1"]},
    2: {"--threads 2": ["--threads", "2"], "--intra-threads 2": ["--intra-threads", "2"]},
}


def bench_score(a, model, results):
    """Per-batch seconds: masque runs `reps` batches of the 8 records in one process and its
    --summary seconds (model load excluded) are divided by `reps`; PyTorch times `reps`
    repetitions after a warm-up."""
    s = a.scratch
    work = repeated(a, "score.ids", a.reps)
    pipeline = os.path.join(s, "gpt2-score.yaml")
    base = ["--input-format", "ids", "--set", f"task.max_batch_size={SCORE_RECORDS}"]
    for threads in (1, 2):
        for r in range(a.rounds):
            log(f"score, {threads} thread(s), round {r + 1}, load {loadavg()}")
            for label, opts in MASQUE_CONFIGS[threads].items():
                for dtype in a.dtypes:
                    sec, wall, out, cmd = run_masque(a, pipeline, work,
                                                     base + opts + dtype_options(dtype))
                    nll = sum(o["nll"] for o in out[:SCORE_RECORDS])
                    results.append({"bench": "score", "side": "masque", "threads": threads,
                                    "config": label, "dtype": dtype, "batch_seconds": sec / a.reps,
                                    "nll": nll, "load": loadavg(), "cmd": cmd})
            for dtype in a.dtypes:
                for peer in peers_for(dtype):
                    t, cmd = run_torch(a, model, "score", os.path.join(s, "score.ids"), threads,
                                       a.reps, ["--dtype", dtype], peer)
                    results.append({"bench": "score", "side": "torch", "threads": threads,
                                    "config": peer, "dtype": dtype,
                                    "batch_seconds": median(t["seconds"]), "nll": t["nll"],
                                    "load_seconds": t["load_seconds"], "load": loadavg(),
                                    "cmd": cmd, **engines(t)})


def dtype_options(dtype):
    return [] if dtype == "f32" else ["--set", f"model.matmul_dtype={dtype}"]


# ---- issue 5 (b): generation at batch 1 ------------------------------------------------------

GEN_CONFIGS = {1: {"--threads 1": ["--threads", "1"]},
               2: {"--intra-threads 2": ["--intra-threads", "2"]}}


def bench_generate(a, model, results):
    """ms per generated token, prompt prefill included on both sides: masque generates for
    `reps` copies of the prompt one after another (batch 1) in one process; PyTorch times
    `reps` generations after a warm-up one. For masque in f32 also the time of a decoding step
    alone (the bandwidth target's unit): the same run with one new token (prefill and the first
    step) is subtracted and the rest divided by the other NEW_TOKENS - 1 steps."""
    s = a.scratch
    work = repeated(a, "prompt.ids", a.reps)
    pipeline = os.path.join(s, "gpt2-generate.yaml")
    base = ["--input-format", "ids", "--set", "task.max_batch_size=1",
            "--set", f"decoder.max_new_tokens={NEW_TOKENS}",
            "--set", f"decoder.min_new_tokens={NEW_TOKENS}"]
    for threads in (1, 2):
        for r in range(a.rounds):
            log(f"generate, {threads} thread(s), round {r + 1}, load {loadavg()}")
            for label, opts in GEN_CONFIGS[threads].items():
                for dtype in a.dtypes:
                    sec, wall, out, cmd = run_masque(a, pipeline, work,
                                                     base + opts + dtype_options(dtype))
                    row = {"bench": "generate", "side": "masque", "threads": threads,
                           "config": label, "dtype": dtype,
                           "ms_per_token": 1e3 * sec / (a.reps * NEW_TOKENS),
                           "tokens": out[0]["tokens"], "load": loadavg(), "cmd": cmd}
                    if dtype == "f32":
                        one = ["--set", "decoder.max_new_tokens=1", "--set", "decoder.min_new_tokens=1"]
                        first, _, _, _ = run_masque(a, pipeline, work,
                                                    base + opts + dtype_options(dtype) + one)
                        row["ms_per_step"] = 1e3 * (sec - first) / (a.reps * (NEW_TOKENS - 1))
                    results.append(row)
            for dtype in a.dtypes:
                for peer in peers_for(dtype):
                    t, cmd = run_torch(a, model, "generate", os.path.join(s, "prompt.ids"),
                                       threads, a.reps,
                                       ["--new-tokens", str(NEW_TOKENS), "--dtype", dtype], peer)
                    results.append({"bench": "generate", "side": "torch", "threads": threads,
                                    "config": peer, "dtype": dtype,
                                    "ms_per_token": 1e3 * median(t["seconds"]) / NEW_TOKENS,
                                    "tokens": t["generated"][0],
                                    "load_seconds": t["load_seconds"], "load": loadavg(),
                                    "cmd": cmd, **engines(t)})


def bench_load(a, results):
    """Model load: a masque process on no records (process wall time)."""
    empty = os.path.join(a.scratch, "empty.ids")
    open(empty, "w").close()
    for _ in range(a.rounds):
        sec, wall, _, cmd = run_masque(a, os.path.join(a.scratch, "gpt2-score.yaml"), empty,
                                       ["--input-format", "ids"])
        results.append({"bench": "load", "side": "masque", "wall": wall, "cmd": cmd})


# ---- issue 8: lm-score records/s on corpora --------------------------------------------------

def corpora(a, model):
    s = a.scratch
    return [
        {"name": "stories260k", "model": STORIES, "records": STORY_RECORDS,
         "pipeline": os.path.join(ROOT, "pipelines", "lm-score.yaml"),
         "text": os.path.join(s, "stories.txt"), "ids": os.path.join(s, "stories.ids")},
        {"name": "gpt2-small", "model": model, "records": GPT2_CORPUS_RECORDS,
         "pipeline": os.path.join(s, "gpt2-score-text.yaml"),
         "text": os.path.join(s, "stories-gpt2.txt"), "ids": os.path.join(s, "stories-gpt2.ids")},
    ]


def bench_corpus(a, model, results):
    """Records/s over a whole corpus: masque reads the text (tokenizing it) and its --summary
    seconds exclude the model load; PyTorch scores the same records' ids in batches formed
    like masque's, timed after a warm-up pass over the corpus."""
    for c in corpora(a, model):
        for batch in (1, 8, 32):
            for threads in (1, 2):
                for r in range(a.rounds):
                    log(f"corpus {c['name']}, batch {batch}, {threads} thread(s), round {r + 1}, "
                        f"load {loadavg()}")
                    for label, opts in MASQUE_CONFIGS[threads].items():
                        sec, wall, out, cmd = run_masque(
                            a, c["pipeline"], c["text"],
                            opts + ["--set", f"task.max_batch_size={batch}"])
                        results.append({"bench": "corpus", "corpus": c["name"], "side": "masque",
                                        "batch": batch, "threads": threads, "config": label,
                                        "records_per_second": len(out) / sec,
                                        "nll": sum(o["nll"] for o in out), "load": loadavg(),
                                        "cmd": cmd})
                    t, cmd = run_torch(a, c["model"], "corpus", c["ids"], threads, 1,
                                       ["--batch-size", str(batch)])
                    results.append({"bench": "corpus", "corpus": c["name"], "side": "torch",
                                    "batch": batch, "threads": threads, "config": "tuned",
                                    "records_per_second": t["records"] / median(t["seconds"]),
                                    "nll": t["nll"], "load": loadavg(), "cmd": cmd})


# ---- tables ----------------------------------------------------------------------------------

class Results(list):
    """Measurements, saved to a file after each one (an interrupted run keeps what it has)."""

    def __init__(self, path, header):
        super().__init__()
        self.path, self.header = path, header

    def append(self, row):
        super().append(row)
        with open(self.path, "w") as f:
            json.dump({**self.header, "results": list(self)}, f, indent=1)


def select(results, **kw):
    return [r for r in results if all(r.get(k) == v for k, v in kw.items())]


def best_config(results, metric, lower_is_better, **kw):
    """The masque configuration with the best median, and that median."""
    configs = {r["config"] for r in select(results, side="masque", **kw)}
    medians = {c: median([r[metric] for r in select(results, side="masque", config=c, **kw)])
               for c in configs}
    pick = (min if lower_is_better else max)(medians, key=medians.get)
    return pick, medians[pick], medians


def peer_median(results, metric, peer, **kw):
    rows = select(results, side="torch", config=peer, **kw)
    return (median([r[metric] for r in rows]), rows[0]) if rows else (None, None)


def percent(value, limit):
    return f"{100 * value / limit:.0f} %" if limit == limit and limit and value == value else "–"


def table_score(results, dtypes, header):
    lines = ["| matmuls | threads | masque config | masque tokens/s | masque % of FMA peak | PyTorch tuned | ratio | PyTorch plain | ratio | NLL masque / PyTorch |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    flops = header.get("score_flops_per_token", float("nan"))
    tokens = SCORE_RECORDS * SCORE_LENGTH
    for dtype in dtypes:
        for threads in (1, 2):
            kw = dict(bench="score", threads=threads, dtype=dtype)
            if not select(results, side="torch", **kw):
                continue
            config, sec, medians = best_config(results, "batch_seconds", True, **kw)
            m = tokens / sec
            nll = select(results, side="masque", **kw)[0]["nll"]
            others = "; ".join(f"{c}: {tokens / v:.0f}" for c, v in sorted(medians.items()) if c != config)
            label = config + (f" ({others})" if others else "")
            cells, torch_nll = [], None
            for peer in PEERS:
                sec_t, row = peer_median(results, "batch_seconds", peer, **kw)
                if row is None:
                    cells += ["–", "–"]
                    continue
                torch_nll = torch_nll if torch_nll is not None else row["nll"]
                cells += [f"{tokens / sec_t:.0f}", f"**{m * sec_t / tokens:.2f}×**"]
            peak = yardstick(results, "peak", threads)
            lines.append(f"| {dtype} | {threads} | {label} | {m:.0f} | "
                         f"{percent(m * flops / 1e9, peak)} | {' | '.join(cells)} | "
                         f"{nll:.3f} / {torch_nll:.3f} |")
    return "\n".join(lines)


def table_generate(results, dtypes, header):
    lines = ["| matmuls | threads | masque config | masque ms/token | masque weights GB/s (% of read bandwidth) | masque ms/step, prefill excluded | weights GB/s per step (%) | PyTorch tuned | masque / tuned | PyTorch plain | masque / plain | same tokens |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    weight_bytes = header.get("f32_weight_bytes", float("nan"))
    for dtype in dtypes:
        for threads in (1, 2):
            kw = dict(bench="generate", threads=threads, dtype=dtype)
            torch_rows = select(results, side="torch", **kw)
            if not torch_rows:
                continue
            config, m, _ = best_config(results, "ms_per_token", True, **kw)
            masque_tokens = select(results, side="masque", **kw)[0]["tokens"]
            same = all(r["tokens"] == masque_tokens for r in torch_rows)
            cells = []
            for peer in PEERS:
                t, row = peer_median(results, "ms_per_token", peer, **kw)
                cells += ["–", "–"] if row is None else [f"{t:.1f}", f"**{m / t:.2f}×**"]
            # f32 only: in bf16/int8 the bytes per token depend on the layer types.
            stream = step = step_stream = "–"
            if dtype == "f32":
                bandwidth = yardstick(results, "bandwidth", threads)
                gbs = weight_bytes / (m / 1e3) / 1e9
                stream = f"{gbs:.1f} ({percent(gbs, bandwidth)})"
                s = median([r["ms_per_step"] for r in
                            select(results, side="masque", config=config, **kw)
                            if "ms_per_step" in r])
                step_gbs = weight_bytes / (s / 1e3) / 1e9
                step, step_stream = f"{s:.1f}", f"{step_gbs:.1f} ({percent(step_gbs, bandwidth)})"
            lines.append(f"| {dtype} | {threads} | {config} | {m:.1f} | {stream} | {step} | "
                         f"{step_stream} | {' | '.join(cells)} | {'yes' if same else 'no'} |")
    return "\n".join(lines)


def table_corpus(results):
    lines = ["| model | batch | threads | masque config | masque records/s | PyTorch records/s | ratio |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for name in ("stories260k", "gpt2-small"):
        for batch in (1, 8, 32):
            for threads in (1, 2):
                kw = dict(bench="corpus", corpus=name, batch=batch, threads=threads)
                torch_rows = select(results, side="torch", **kw)
                if not torch_rows:
                    continue
                t = median([r["records_per_second"] for r in torch_rows])
                config, m, medians = best_config(results, "records_per_second", False, **kw)
                others = "; ".join(f"{c}: {v:.0f}" for c, v in sorted(medians.items()) if c != config)
                label = config + (f" ({others})" if others else "")
                lines.append(f"| {name} | {batch} | {threads} | {label} | {m:.0f} | {t:.0f} | "
                             f"**{m / t:.2f}×** |")
    return "\n".join(lines)


def int8_note(results, bench):
    """Under a table with int8 rows: how PyTorch's int8 differs from masque's, and the engines
    its peers ran (per row count: engine x number of linears, from the last run of each)."""
    runs = []
    for peer in PEERS:
        for threads in (1, 2):
            rows = select(results, bench=bench, side="torch", config=peer, threads=threads,
                          dtype="int8")
            if rows and "int8_engines" in rows[-1]:
                buckets = sorted(rows[-1]["int8_engines"].items(), key=lambda i: int(i[0]))
                per_rows = "; ".join(f"{n} row{'s' if n != '1' else ''}: " +
                                     ", ".join(f"{e} x{c}" for e, c in sorted(counts.items()))
                                     for n, counts in buckets)
                runs.append(f"{peer}, {threads} thread{'s' if threads > 1 else ''}: {per_rows}")
    return ("\nint8: PyTorch quantizes each product's input per tensor (uint8 with a zero point), "
            "masque per row (symmetric int8), so NLLs and tokens agree only approximately. "
            "PyTorch's engines (rows per product: engine x linears): " +
            (" | ".join(runs) if runs else "not recorded") + ".")


def torch_blas(a):
    if a.openblas:
        return f"OpenBLAS from {a.openblas}"
    return "system libblas.so.3 -> " + os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")


def machine():
    with open("/proc/cpuinfo") as f:
        model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    return f"{os.cpu_count()} vCPU, {model}, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--only", default="score,generate,corpus")
    ap.add_argument("--dtypes", default="f32",
                    help="matmul types to run, comma-separated: f32, bf16, int8 (masque "
                         "model.matmul_dtype, torch_lm.py --dtype)")
    ap.add_argument("--openblas", default="",
                    help="directory with OpenBLAS's libblas.so.3 for PyTorch (else the system BLAS)")
    ap.add_argument("--report", action="store_true",
                    help="only print the tables of the results.json in --scratch")
    a = ap.parse_args()
    a.scratch = os.path.abspath(a.scratch)
    a.openblas = os.path.abspath(a.openblas) if a.openblas else ""
    a.dtypes = a.dtypes.split(",")
    for dtype in a.dtypes:
        if dtype not in DTYPES:
            ap.error(f"--dtypes: {dtype!r} is not one of {', '.join(DTYPES)}")
    if "bf16" in a.dtypes and not a.report and not cpu_has_bf16_matmuls():
        print("bench: skipping bf16: this CPU has no AVX-512, so oneDNN 2.6 (and masque) has no "
              "bf16 matmul here", file=sys.stderr)
        a.dtypes.remove("bf16")
    parts = a.only.split(",")
    path = os.path.join(a.scratch, "results.json")
    if a.report:
        with open(path) as f:
            saved = json.load(f)
        results, header = saved["results"], saved
    else:
        header = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
                  "machine": machine(), "load_before": loadavg(), "rounds": a.rounds,
                  "reps": a.reps, "torch_blas": torch_blas(a)}
        model = setup(a)
        header["score_flops_per_token"] = score_flops_per_token(model)
        header["f32_weight_bytes"] = f32_weight_bytes(model)
        results = Results(path, header)
        bench_load(a, results)
        bench_yardsticks(a, results)
        if "score" in parts:
            bench_score(a, model, results)
        if "generate" in parts:
            bench_generate(a, model, results)
        if "corpus" in parts:
            bench_corpus(a, model, results)
        bench_yardsticks(a, results)
        header["load_after"] = loadavg()
        results.append({"bench": "end"})
    report(results, header, parts, a.dtypes)


def report(results, header, parts, dtypes):
    load_rows = select(results, bench="load")
    print(f"date: {header['started']}; machine: {header['machine']}")
    print(f"load average at start: {header['load_before']}; at end: "
          f"{header.get('load_after', '(interrupted)')}; rounds: {header['rounds']}, "
          f"repetitions per process: {header['reps']}")
    print(f"PyTorch's BLAS: {header.get('torch_blas', 'system')}")
    print(f"model load (GPT-2-small, process on 0 records): masque "
          f"{median([r['wall'] for r in load_rows]):.2f} s wall; PyTorch "
          f"{median([r['load_seconds'] for r in select(results, side='torch', bench='score')] or [float('nan')]):.2f} s")
    print(f"measured in the same run (bench_numerics, medians): f32 FMA peak "
          f"{yardstick(results, 'peak', 1):.1f} / {yardstick(results, 'peak', 2):.1f} GFLOP/s, "
          f"memory read bandwidth {yardstick(results, 'bandwidth', 1):.1f} / "
          f"{yardstick(results, 'bandwidth', 2):.1f} GB/s (1 / 2 threads); % of peak counts "
          f"{header.get('score_flops_per_token', float('nan')) / 1e6:.1f} MFLOP per scored token, "
          f"GB/s {header.get('f32_weight_bytes', float('nan')) / 1e6:.1f} MB of f32 weights per "
          f"generated token")
    if "score" in parts:
        print(f"\n### Scoring, GPT-2-small, batch {SCORE_RECORDS} x {SCORE_LENGTH} ids\n")
        print(table_score(results, dtypes, header))
        if "int8" in dtypes:
            print(int8_note(results, "score"))
    if "generate" in parts:
        print(f"\n### Generation, GPT-2-small, batch 1, {PROMPT_LENGTH}-token prompt, "
              f"{NEW_TOKENS} new tokens (greedy, KV cache)\n")
        print(table_generate(results, dtypes, header))
        if "int8" in dtypes:
            print(int8_note(results, "generate"))
    if "corpus" in parts:
        print("\n### lm-score records/s (issue 8)\n")
        print(table_corpus(results))


if __name__ == "__main__":
    main()
