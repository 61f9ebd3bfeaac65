#!/usr/bin/python3
"""Generation benchmark (issue 23): masque's continuous batching against its static batching
and against PyTorch static batching, on the same prompts, in the same run.

    bench.py --build BUILD --scratch DIR [--prompts 2000] [--gpt2-prompts 64]
             [--torch-prompts 500] [--only stories,sentence,gpt2,aren] [--batch 32]
             [--threads 1]
             [--openblas DIR] [--no-torch]
    bench.py --report DIR/results.json

Workloads (deterministic inputs, written to DIR):
- stories: stories260k (../shared/models), PROMPTS text prompts of 0 to ~50 words (an empty
  one starts from BOS), seeded sampling (temperature 1, top_p 0.95), at most 128 new tokens,
  the model's story ends (ids 1 and 2) end a record.
- gpt2: the GPT-2-small-sized random model of bench/lm (make_model.py), GPT2_PROMPTS prompts of
  1 to 64 random ids. Random weights never choose GPT-2's EOS on their own, so the ids
  0..999 stand in for it (about 2 % of the probability mass per step: output lengths spread
  up to the limit).
- stories260k-sentence: the same prompts continued to the end of the sentence ('.', id 426)
  or of the story: short outputs of varied length.
- aren: the encoder-decoder (../shared/models/aren-transliteration) on bench/encdec's 20,000
  lines (../shared/bench/aren-20k.txt), beam 4; no PyTorch peer (bench/encdec has one).
masque runs continuous then static for every workload, PyTorch (the first TORCH_PROMPTS prompts)
last. The machine is shared, so the ratios use CPU seconds (masque: the child process's user +
system time, model load included; PyTorch: process time of its timed loop); wall-clock rates
(--summary seconds, the timed loop) are kept beside them. masque's two outputs must be
byte-identical (the table says so).

Rows per step (the summary's decoding_steps and decoded_rows) show how full each mode kept its
batches, and bound the gain: if a step never costs less with fewer rows and a row never costs
more in a fuller step, continuous batching cannot beat static batching by more than
max rows / static's rows per step (its steps could at best be full), whatever the code.
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared"))
sys.path.insert(0, os.path.join(ROOT, "bench", "lm"))
from make_inputs import sentence  # noqa: E402

END_IDS = 1000


def stories_prompts(path, count, seed=5):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            words = " ".join(sentence(rng) for _ in range(3)).split()
            f.write(" ".join(words[:rng.randint(0, 50)]) + "\n")


def gpt2_prompts(path, count, seed=6):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            f.write(" ".join(str(rng.randrange(50257)) for _ in range(rng.randint(1, 64))) + "\n")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def workloads(args):
    out = {}
    s = args.scratch
    if "stories" in args.only or "sentence" in args.only:
        model = os.path.join(SHARED, "models", "stories260k")
        prompts = os.path.join(s, "stories_prompts.txt")
        stories_prompts(prompts, args.prompts)
        pipe = os.path.join(s, "stories.yaml")
        write(pipe, f"""task: lm-generate
model:
  plugin: llama
  path: {model}
tokenizer:
  plugin: sentencepiece
  path: {model}
decoder:
  plugin: sample
  seed: 1
  top_p: 0.95
  max_new_tokens: 128
  end_tokens: [1, 2]
""")
        if "stories" in args.only:
            out["stories260k"] = {"pipeline": pipe, "input": prompts, "format": "text",
                                  "model": model, "ends": "1,2"}
    if "sentence" in args.only:
        # The same prompts continued to the end of the sentence ('.' is id 426) or the story.
        model = os.path.join(SHARED, "models", "stories260k")
        prompts = os.path.join(s, "stories_prompts.txt")
        stories_prompts(prompts, args.prompts)
        pipe = os.path.join(s, "sentence.yaml")
        with open(os.path.join(s, "stories.yaml")) as f:
            write(pipe, f.read().replace("end_tokens: [1, 2]", "end_tokens: [1, 2, 426]"))
        out["stories260k-sentence"] = {"pipeline": pipe, "input": prompts, "format": "text",
                                       "model": model, "ends": "1,2,426"}
    if "gpt2" in args.only:
        model = os.path.join(args.scratch, "gpt2-small")
        if not os.path.exists(os.path.join(model, "model.safetensors")):
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "lm", "make_model.py"),
                            model], check=True)
        prompts = os.path.join(s, "gpt2_prompts.txt")
        gpt2_prompts(prompts, args.gpt2_prompts)
        ends = list(range(END_IDS))
        pipe = os.path.join(s, "gpt2.yaml")
        write(pipe, f"""task: lm-generate
model:
  plugin: gpt2
  path: {model}
decoder:
  plugin: sample
  seed: 1
  top_p: 0.95
  max_new_tokens: 128
  end_tokens: {json.dumps(ends)}
""")
        out["gpt2-small"] = {"pipeline": pipe, "input": prompts, "format": "ids", "model": model,
                             "ends": ",".join(map(str, ends))}
    if "aren" in args.only:
        # The encoder-decoder on bench/encdec's 20,000 lines, beam 4 (a record's beams are rows);
        # no PyTorch peer here (bench/encdec has it).
        model = os.path.join(SHARED, "models", "aren-transliteration")
        pipe = os.path.join(s, "aren.yaml")
        write(pipe, f"""task: seq2seq
model:
  plugin: encoder-decoder
  path: {model}
tokenizer:
  plugin: vocab
  vocab: {model}/source_vocab.txt
target_tokenizer:
  plugin: vocab
  vocab: {model}/target_vocab.txt
decoder:
  plugin: beam
  beam_size: 4
  length_penalty: 1.0
  max_new_tokens: 256
  min_new_tokens: 1
""")
        # Continuous batching's max_batch_size counts rows, a record's beams included; static
        # batching's counts records: continuous gets batch x 4 rows, the same rows as static.
        out["aren beam 4"] = {"pipeline": pipe, "input": os.path.join(SHARED, "bench", "aren-20k.txt"),
                              "format": "text", "model": model, "no_torch": True,
                              "rows_per_record": 4}
    return out


def run_masque(args, w, batching):
    summary = os.path.join(args.scratch, "summary.json")
    out = os.path.join(args.scratch, f"out_{batching}.jsonl")
    batch = args.batch * (w.get("rows_per_record", 1) if batching == "continuous" else 1)
    cmd = [os.path.join(args.build, "bin", "masque"), "run", w["pipeline"], "-q",
           "--input-format", w["format"], "--summary", summary, "--threads", str(args.threads),
           "--set", f"run.batching={batching}", "--set", f"run.max_batch_size={batch}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(w["input"]) as fin, open(out, "w") as fout:
        subprocess.run(cmd, stdin=fin, stdout=fout, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    with open(summary) as f:
        s = json.load(f)
    generated = 0
    with open(out) as f:
        for line in f:
            generated += len(json.loads(line)["tokens"])
    with open(out, "rb") as f:
        text = f.read()
    task = s.get("task") or {}
    return {"seconds": s["seconds"], "cpu_seconds": cpu, "records": s["records"],
            "generated": generated, "steps": task.get("decoding_steps"),
            "rows": task.get("decoded_rows"), "command": " ".join(cmd)}, text


def prompt_ids(args, w):
    """The prompts as masque tokenizes them (what the PyTorch peer is given)."""
    if w["format"] == "ids":
        return w["input"]
    path = os.path.join(args.scratch, "stories_prompt_ids.txt")
    cmd = [os.path.join(args.build, "bin", "masque"), "run", w["pipeline"], "-q", "--set",
           "task.name=tokenize", "--set", "task.add_special=true"]
    with open(w["input"]) as fin:
        res = subprocess.run(cmd, stdin=fin, capture_output=True, text=True, check=True)
    with open(path, "w") as f:
        for line in res.stdout.splitlines():
            ids = json.loads(line)["ids"] or [1]  # an empty prompt starts from BOS, as masque
            f.write(" ".join(map(str, ids)) + "\n")
    return path


def run_torch(args, w, ids_path):
    env = dict(os.environ)
    if args.openblas:
        env["LD_LIBRARY_PATH"] = args.openblas + ":" + env.get("LD_LIBRARY_PATH", "")
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_generate.py"), w["model"], "--ids",
           ids_path, "--batch", str(args.batch), "--new-tokens", "128", "--end-tokens", w["ends"],
           "--threads", str(args.threads), "--limit", str(args.torch_prompts)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["command"] = " ".join(cmd)
    return out


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--gpt2-prompts", type=int, default=64)
    ap.add_argument("--only", default="stories,sentence,gpt2,aren")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1,
                    help="masque runs per batching mode, alternating; the table shows medians")
    ap.add_argument("--openblas", default="")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-prompts", type=int, default=0,
                    help="the PyTorch peer runs the first N prompts only (0: all)")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    results = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "batch": args.batch, "threads": args.threads, "workloads": {}}
    # masque first for every workload, PyTorch last: its runs are the longest.
    work = workloads(args)
    for name, w in work.items():
        runs = {"continuous": [], "static": []}
        same = True
        for _ in range(args.rounds):
            cont, cont_text = run_masque(args, w, "continuous")
            stat, stat_text = run_masque(args, w, "static")
            runs["continuous"].append(cont)
            runs["static"].append(stat)
            same = same and cont_text == stat_text
        r = {"continuous": median_run(runs["continuous"]), "static": median_run(runs["static"]),
             "rounds": runs, "same_output": same, "load": os.getloadavg()[0],
             "rows_per_record": w.get("rows_per_record", 1)}
        results["workloads"][name] = [r]
        print(json.dumps({name: r}), file=sys.stderr, flush=True)
        save(args, results)
    if not args.no_torch:
        for name, w in work.items():
            if w.get("no_torch"):
                continue
            r = run_torch(args, w, prompt_ids(args, w))
            results["workloads"][name][0]["torch"] = r
            print(json.dumps({name: {"torch": r}}), file=sys.stderr, flush=True)
            save(args, results)
    report(results)


def median_run(runs):
    """The run with the median CPU time (the lower middle one for an even count)."""
    return sorted(runs, key=lambda r: r["cpu_seconds"])[(len(runs) - 1) // 2]


def save(args, results):
    with open(os.path.join(args.scratch, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


def rows_per_step(run):
    return run["rows"] / run["steps"] if run.get("steps") else None


def fullness(results, r):
    """Rows per decoding step in each mode, and the most continuous batching could gain over
    static batching: max rows / static's rows per step (bench.py's docstring)."""
    cont, stat = rows_per_step(r["continuous"]), rows_per_step(r["static"])
    if cont is None or stat is None:
        return "–"
    rows = results["batch"] * r.get("rows_per_record", 1)
    return f"{cont:.1f}; {stat:.1f} (≤ {rows / stat:.2f}×)"


def report(results):
    rounds = max(len(r[0].get("rounds", {}).get("static", [1]))
                 for r in results["workloads"].values())
    beam_rows = (f" (continuous beam 4: {4 * results['batch']} rows)"
                 if "aren beam 4" in results["workloads"] else "")
    print(f"{results['cpu']}, {results['date']}, max_batch_size {results['batch']}{beam_rows}, "
          f"--threads {results['threads']}, median of "
          f"{rounds} round(s). Records per CPU-second (wall-clock records/s in brackets).\n")
    print("| model | records | masque continuous | masque static | continuous / static | "
          "rows per step: continuous; static (bound) | "
          "PyTorch static | continuous / PyTorch | same output | tokens masque / PyTorch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for name, rounds in results["workloads"].items():
        r = rounds[0]

        def rates(key):
            if key not in r:
                return None, None
            return r[key]["records"] / r[key]["cpu_seconds"], r[key]["records"] / r[key]["seconds"]
        (c, cw), (s, sw), (t, tw) = rates("continuous"), rates("static"), rates("torch")
        same = "yes" if r["same_output"] else "NO"
        torch_cells = (f"{t:.1f} ({tw:.1f}) | **{c / t:.2f}×**" if t else "– | –")
        tok = f"{r['continuous']['generated']} / " + (
            f"{r['torch']['generated']} ({r['torch']['records']} records)" if t else "–")
        print(f"| {name} | {r['continuous']['records']} | {c:.1f} ({cw:.1f}) | {s:.1f} ({sw:.1f}) "
              f"| **{c / s:.2f}×** | {fullness(results, r)} | {torch_cells} | {same} | {tok} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--report":
        with open(sys.argv[2]) as f:
            report(json.load(f))
    else:
        main()
