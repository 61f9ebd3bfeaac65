#!/usr/bin/python3
"""Generation benchmark (issue 23): masque's continuous batching against its static batching
and against PyTorch static batching, on the same prompts, in the same run.

    bench.py --build BUILD --scratch DIR [--rounds 1] [--prompts 2000] [--gpt2-prompts 256]
             [--only stories,gpt2] [--batch 32] [--threads 1] [--openblas DIR]

Workloads (deterministic inputs, written to DIR):
- stories: stories260k (../shared/models), PROMPTS text prompts of 0 to ~50 words (an empty
  one starts from BOS), seeded sampling (temperature 1, top_p 0.95), at most 128 new tokens,
  the model's story ends (ids 1 and 2) end a record.
- gpt2: the GPT-2-small-sized random model of bench/lm (make_model.py), GPT2_PROMPTS prompts of
  1 to 64 random ids. Random weights never choose GPT-2's EOS on their own, so the ids
  0..999 stand in for it (about 2 % of the probability mass per step: output lengths spread
  up to the limit).
Each round runs masque continuous, masque static, then PyTorch; records/s is records over the
generation time (masque: the --summary seconds; PyTorch: its timed loop), medians over rounds.
masque's two outputs must be byte-identical (the table says so).
"""
import argparse
import json
import os
import random
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
    return out


def run_masque(args, w, batching):
    summary = os.path.join(args.scratch, "summary.json")
    out = os.path.join(args.scratch, f"out_{batching}.jsonl")
    cmd = [os.path.join(args.build, "bin", "masque"), "run", w["pipeline"], "-q",
           "--input-format", w["format"], "--summary", summary, "--threads", str(args.threads),
           "--set", f"run.batching={batching}", "--set", f"run.max_batch_size={args.batch}"]
    with open(w["input"]) as fin, open(out, "w") as fout:
        subprocess.run(cmd, stdin=fin, stdout=fout, check=True)
    with open(summary) as f:
        s = json.load(f)
    generated = 0
    with open(out) as f:
        for line in f:
            generated += len(json.loads(line)["tokens"])
    with open(out, "rb") as f:
        text = f.read()
    return {"seconds": s["seconds"], "records": s["records"], "generated": generated,
            "command": " ".join(cmd)}, text


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
           "--threads", str(args.threads)]
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
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--gpt2-prompts", type=int, default=128)
    ap.add_argument("--only", default="stories,sentence,gpt2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--openblas", default="")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    results = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "batch": args.batch, "threads": args.threads, "workloads": {}}
    for name, w in workloads(args).items():
        ids_path = None if args.no_torch else prompt_ids(args, w)
        rounds = []
        for _ in range(args.rounds):
            cont, cont_text = run_masque(args, w, "continuous")
            stat, stat_text = run_masque(args, w, "static")
            r = {"continuous": cont, "static": stat, "same_output": cont_text == stat_text,
                 "load": os.getloadavg()[0]}
            if ids_path:
                r["torch"] = run_torch(args, w, ids_path)
            rounds.append(r)
            print(json.dumps({name: r}), file=sys.stderr)
        results["workloads"][name] = rounds
    with open(os.path.join(args.scratch, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report(results)


def report(results):
    print(f"{results['cpu']}, {results['date']}, max_batch_size {results['batch']}, "
          f"--threads {results['threads']}\n")
    print("| model | records | masque continuous rec/s | masque static rec/s | continuous / "
          "static | PyTorch static rec/s | continuous / PyTorch | same output | tokens "
          "(masque / PyTorch) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for name, rounds in results["workloads"].items():
        def rate(key):
            vals = [r[key]["records"] / r[key]["seconds"] for r in rounds if key in r]
            return statistics.median(vals) if vals else None
        c, s, t = rate("continuous"), rate("static"), rate("torch")
        same = "yes" if all(r["same_output"] for r in rounds) else "NO"
        tok = f"{rounds[0]['continuous']['generated']} / " + (
            str(rounds[0]["torch"]["generated"]) if "torch" in rounds[0] else "–")
        print(f"| {name} | {rounds[0]['continuous']['records']} | {c:.1f} | {s:.1f} | "
              f"**{c / s:.2f}×** | {t:.1f} | **{c / t:.2f}×** | {same} | {tok} |"
              if t else
              f"| {name} | {rounds[0]['continuous']['records']} | {c:.1f} | {s:.1f} | "
              f"**{c / s:.2f}×** | – | – | {same} | {tok} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--report":
        with open(sys.argv[2]) as f:
            report(json.load(f))
    else:
        main()
