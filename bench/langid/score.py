#!/usr/bin/env python3
"""Accuracy of language-identification answers on scripts/langid_data.py's test set.

Usage: score.py TEST.tsv NAME=ANSWERS.jsonl [NAME=ANSWERS.jsonl ...] [--markdown]

ANSWERS.jsonl: one JSON object per test sentence, {"id": i, "label": code} (masque's classify
output, masque-bench-cld2's); records with "error" count as wrong. Prints, per language and
overall, each system's accuracy on all sentences, on short ones (<= 40 characters) and on long
ones, over the languages every system can answer (a language a system never outputs and does
not know is still counted: it is in the test set).
"""
import json
import sys
from collections import defaultdict


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    markdown = "--markdown" in sys.argv
    test = args[0]
    gold = []
    with open(test, encoding="utf-8") as f:
        next(f)
        for line in f:
            text, lang = line.rstrip("\n").split("\t")
            gold.append((text, lang))
    systems = {}
    for spec in args[1:]:
        name, path = spec.split("=", 1)
        answers = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                j = json.loads(line)
                answers[j["id"]] = j.get("label", "")
        if len(answers) != len(gold):
            sys.exit(f"score.py: {path} has {len(answers)} answers for {len(gold)} sentences")
        systems[name] = answers
    langs = sorted({l for _, l in gold})
    counts = defaultdict(lambda: [0, 0])  # (system, lang, bucket) -> correct, total
    for i, (text, lang) in enumerate(gold):
        bucket = "short" if len(text) <= 40 else "long"
        for name, answers in systems.items():
            ok = answers[i] == lang
            for key in ((name, lang, "all"), (name, lang, bucket), (name, "overall", "all"),
                        (name, "overall", bucket)):
                counts[key][0] += ok
                counts[key][1] += 1
    acc = lambda k: 100.0 * counts[k][0] / counts[k][1] if counts[k][1] else float("nan")  # noqa
    names = list(systems)
    header = ["lang", "test"] + [f"{n} {b}" for n in names for b in ("all", "≤40", ">40")]
    rows = []
    for lang in langs + ["overall"]:
        total = counts[(names[0], lang, "all")][1]
        rows.append([lang, str(total)] + [f"{acc((n, lang, b)):.1f}" for n in names
                                          for b in ("all", "short", "long")])
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + " --- |" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print("\t".join(header))
        for r in rows:
            print("\t".join(r))


if __name__ == "__main__":
    main()
