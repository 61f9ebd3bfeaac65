#!/usr/bin/python3
"""Token-id records from real text: paragraphs of the documentation under /usr/share/doc.

    make_corpus.py --masque BIN --vocab VOCAB.txt --count N --max-length L --out OUT.ids
                   [--doc-root /usr/share/doc] [--seed 49]

Paragraphs (blank-line separated, lines joined, whitespace collapsed) of every plain-text file
under the doc root (README, NEWS, changelogs, *.txt, ...; .gz read decompressed; the
`copyright` files are left out, being mostly the same licence texts, and so are markup, code
and data files by their names: HTML, JavaScript, JSON, XML, C, Python, ...), kept when they hold at
least 8 words and are mostly letters (at least 60 % of their non-space characters; drops
tables, code and changelog trailer lines), deduplicated, in a seeded shuffle of the sorted
list; the first N are tokenized with masque's own `wordpiece` tokenizer (`masque tokenize`,
[CLS] ... [SEP]) on the real bert-base-uncased vocabulary, and a record longer than L ids
keeps its first L - 1 and ends with [SEP], as Hugging Face's truncation does. OUT.ids has one
record a line (masque's `--input-format ids`); OUT.json the texts' sources, the length
histogram and a digest of the ids. Which paragraphs exist depends on the packages installed:
the histogram and digest in the results say what was measured.
"""
import argparse
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys

SEP = 102
# markup, code and data: their "paragraphs" are not prose
SKIP = re.compile(r"\.(html?|js|mjs|css|svg|json|xml|py|c|h|cc|cpp|hpp|sh|pl|rb|ya?ml|ts|map|"
                  r"png|jpg|gif|pdf|ps|eps|dia|sgml|pp|pas|inc|texi)(\.gz)?$", re.I)


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read(4 << 20)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def paragraphs(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if (name == "copyright" or SKIP.search(name) or os.path.islink(path)
                    or not os.path.isfile(path)):
                continue
            text = read_text(path)
            if text is None or "\0" in text:
                continue
            for block in re.split(r"\n\s*\n", text):
                p = " ".join(block.split())
                letters = sum(c.isalpha() for c in p)
                if len(p.split()) >= 8 and letters >= 0.6 * len(p.replace(" ", "")):
                    yield path, p


def histogram(lengths, max_length):
    edges = [e for e in (16, 32, 64, 128, 256, 512) if e <= max_length]
    bins, low = [], 1
    for e in edges:
        bins.append({"tokens": f"{low}-{e}", "records": sum(low <= n <= e for n in lengths)})
        low = e + 1
    s = sorted(lengths)
    return {"bins": bins, "mean": sum(s) / len(s), "median": s[len(s) // 2], "max": s[-1],
            "truncated": sum(n == max_length for n in lengths), "total_tokens": sum(s)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--masque", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--max-length", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--doc-root", default="/usr/share/doc")
    ap.add_argument("--seed", type=int, default=49)
    a = ap.parse_args()
    seen, found = set(), []
    for path, p in paragraphs(a.doc_root):
        if p not in seen:
            seen.add(p)
            found.append((path, p))
    random.Random(a.seed).shuffle(found)
    chosen = found[:a.count]
    if len(chosen) < a.count:
        sys.exit(f"make_corpus: only {len(chosen)} paragraphs under {a.doc_root}")
    # One paragraph a line: masque's text records are lines (a paragraph has no newline left).
    text = "".join(p + "\n" for _, p in chosen)
    r = subprocess.run([a.masque, "tokenize", "--tokenizer", "wordpiece", "--set",
                        f"vocab={a.vocab}"], input=text, capture_output=True, text=True,
                       check=True)
    records = []
    for line in r.stdout.splitlines():
        ids = json.loads(line)["ids"]
        if len(ids) > a.max_length:
            ids = ids[:a.max_length - 1] + [SEP]
        records.append(ids)
    assert len(records) == len(chosen)
    body = "".join(" ".join(map(str, ids)) + "\n" for ids in records)
    with open(a.out, "w") as f:
        f.write(body)
    lengths = [len(ids) for ids in records]
    info = {"doc_root": a.doc_root, "candidates": len(found), "count": a.count,
            "max_length": a.max_length, "seed": a.seed,
            "sha256": hashlib.sha256(body.encode()).hexdigest()[:16],
            "histogram": histogram(lengths, a.max_length),
            "sources": sorted({path for path, _ in chosen})}
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(info, f, indent=1)
    h = info["histogram"]
    print(f"make_corpus: {a.count} of {len(found)} paragraphs, {h['total_tokens']} tokens, "
          f"mean {h['mean']:.1f}, median {h['median']}, {h['truncated']} truncated at "
          f"{a.max_length}", file=sys.stderr)


if __name__ == "__main__":
    main()
