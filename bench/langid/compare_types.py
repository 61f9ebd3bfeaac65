#!/usr/bin/env python3
"""Compare classify outputs of one model at several matmul types with the first (f32).

    compare_types.py TEST.tsv NAME=OUT.jsonl [NAME=OUT.jsonl ...]

Each OUT.jsonl holds one record per test line (masque run --task classify with top_k 0 and
return_logits). Prints a markdown table: accuracy against TEST.tsv's `lang` column, answers
that differ from the first file's, mean and max |logit difference| over every label, and the
mean KL divergence (nats) of the softmax over labels from the first file's.
"""
import csv
import json
import math
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def softmax(logits):
    top = max(logits)
    e = [math.exp(v - top) for v in logits]
    s = sum(e)
    return [v / s for v in e]


def main():
    test, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    with open(test, encoding="utf-8", newline="") as f:
        truth = [row["lang"] for row in csv.DictReader(f, delimiter="\t")]
    outputs = {name: read(path) for name, path in runs}
    base_name = runs[0][0]
    base = outputs[base_name]
    for name, records in outputs.items():
        if len(records) != len(truth):
            sys.exit(f"compare_types.py: {name}: {len(records)} records for {len(truth)} lines")
    print(f"{len(truth)} test sentences; differences against {base_name}\n")
    print("| matmul type | accuracy | answers changed | mean \\|Δ logit\\| | max \\|Δ logit\\| "
          "| mean KL (nats) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, records in outputs.items():
        correct = sum(r["label"] == t for r, t in zip(records, truth))
        changed = sum(r["label"] != b["label"] for r, b in zip(records, base))
        diffs, kl = [], 0.0
        for r, b in zip(records, base):
            la, lb = r["logits"], b["logits"]
            diffs.extend(abs(x - y) for x, y in zip(la, lb))
            p, q = softmax(lb), softmax(la)
            kl += sum(pi * (math.log(pi) - math.log(qi)) for pi, qi in zip(p, q) if pi > 0)
        print(f"| {name} | {100.0 * correct / len(truth):.2f} % | {changed} | "
              f"{sum(diffs) / len(diffs):.1e} | {max(diffs):.1e} | {kl / len(records):.1e} |")


if __name__ == "__main__":
    main()
