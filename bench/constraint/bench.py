#!/usr/bin/python3
"""Constrained decoding's cost per step (issue 48): GPT-2-small, batch 8, with and without a JSON schema.

    bench.py --build build --scratch bench/out/constraint [--rounds 3] [--threads 1] [--prompts 32]

The same prompts run twice per round, alternating which goes first: free greedy decoding and
greedy decoding under a JSON schema, both `max_new_tokens` steps for every row (the free run
with `min_new_tokens` = `max_new_tokens`; the schema asks for more items than fit, so no row
ends early), static batches of 8. The figure is the time per decoded row (the --summary's
seconds over its decoded_rows), whose ratio is the constraint's overhead per decoding step at
batch 8: the masks (a cached bit set per grammar state, applied to 50,257 logits a row), the
state advance per token, and the masks computed for states met the first time (a walk over a
byte trie of the vocabulary). Medians over rounds; the CPU is named.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

# Items that cannot all fit in the steps: every row decodes to the limit.
SCHEMA = {"type": "object", "required": ["items"], "properties": {"items": {
    "type": "array", "minItems": 40, "items": {
        "type": "object", "required": ["name", "n", "ok"],
        "properties": {"name": {"type": "string", "maxLength": 24}, "n": {"type": "integer"},
                       "ok": {"type": "boolean"}}}}}}


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def setup(args):
    os.makedirs(args.scratch, exist_ok=True)
    model = os.path.join(args.scratch, "gpt2-small")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench/lm/make_model.py"), model],
                       check=True)
    schema = os.path.join(args.scratch, "items.schema.json")
    with open(schema, "w") as f:
        json.dump(SCHEMA, f)
    words = "the a of list items names numbers and some more text about it".split()
    prompts = os.path.join(args.scratch, "prompts.txt")
    with open(prompts, "w") as f:
        for i in range(args.prompts):
            f.write(" ".join(words[(i * 5 + k * 3) % len(words)] for k in range(2 + i % 9)) + "\n")
    pipe = os.path.join(args.scratch, "gpt2.yaml")
    tok = os.path.join(SHARED, "tokenizers", "gpt2")
    with open(pipe, "w") as f:
        f.write(f"""task: lm-generate
model: {{plugin: gpt2, path: {model}}}
tokenizer: {{plugin: bpe, path: {tok}}}
decoder: {{plugin: greedy, max_new_tokens: {args.steps}}}
""")
    return pipe, schema, prompts


def run(args, pipe, prompts, extra, name):
    summary = os.path.join(args.scratch, f"summary_{name}.json")
    out = os.path.join(args.scratch, f"out_{name}.jsonl")
    cmd = [os.path.join(args.build, "bin", "masque"), "run", pipe, "-q", "-i", prompts, "-o", out,
           "--summary", summary, "--threads", "1", "--intra-threads", str(args.threads),
           "--set", "run.batching=static", "--set", "run.max_batch_size=8"] + extra
    subprocess.run(cmd, check=False)
    with open(summary) as f:
        s = json.load(f)
    # Every row runs to the limit in both runs: the first token comes from the prompt's
    # logits, then steps - 1 model steps a row. (A run whose records all end as error records,
    # as the schema's do, has no task figures in its summary.)
    task = s.get("task") or {}
    rows = task.get("decoded_rows", args.prompts * (args.steps - 1))
    steps = task.get("decoding_steps", -(-args.prompts // 8) * (args.steps - 1))
    return {"seconds": s["seconds"], "rows": rows, "steps": steps,
            "per_row_ms": 1000 * s["seconds"] / rows, "command": " ".join(cmd)}, out


def validate(args, schema, out):
    res = subprocess.run(["python3", os.path.join(ROOT, "tests/grammar/json_schema_check.py"),
                          schema, out, "text", "--allow-errors"], capture_output=True, text=True)
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--steps", type=int, default=48)
    args = ap.parse_args()
    pipe, schema, prompts = setup(args)
    free = ["--set", f"decoder.min_new_tokens={args.steps}"]
    bound = ["--set", "constraint.plugin=json-schema", "--set", f"constraint.file={schema}"]
    results = {"cpu": cpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "free": [], "schema": []}
    for r in range(args.rounds):
        order = [("free", free), ("schema", bound)]
        if r % 2:
            order.reverse()
        for name, extra in order:
            m, out = run(args, pipe, prompts, extra, name)
            results[name].append(m)
            print(f"round {r + 1} {name}: {m['per_row_ms']:.2f} ms a row "
                  f"({m['rows']} rows, {m['steps']} steps, {m['seconds']:.1f} s)", file=sys.stderr)
            if name == "schema":
                results["check"] = validate(args, schema, out)
    with open(os.path.join(args.scratch, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    f_ms = statistics.median(m["per_row_ms"] for m in results["free"])
    s_ms = statistics.median(m["per_row_ms"] for m in results["schema"])
    print(f"{results['cpu']}, {results['date']}, GPT-2-small (random weights), batch 8, "
          f"{args.steps} steps a row, {args.prompts} prompts, {args.threads} thread(s), "
          f"medians of {args.rounds} rounds")
    print()
    print("| decoding | ms per decoded row | steps per row at batch 8 | overhead |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| free (greedy) | {f_ms:.2f} | {results['free'][0]['rows'] / results['free'][0]['steps']:.1f} | |")
    print(f"| JSON schema (greedy) | {s_ms:.2f} | {results['schema'][0]['rows'] / results['schema'][0]['steps']:.1f} | **{100 * (s_ms / f_ms - 1):+.1f} %** |")
    print()
    print(f"schema outputs (error records: cut by max_new_tokens, as designed): {results.get('check')}")


if __name__ == "__main__":
    main()
