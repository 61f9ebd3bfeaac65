#!/usr/bin/env python3
"""Language-identification data from the gettext catalogs Debian installs (docs/langid.md).

Usage: scripts/langid_data.py OUT_DIR [--locales /usr/share/locale] [--min-catalogs 40]
                                      [--max-train 4000] [--max-test 600]

Reads every /usr/share/locale/LOCALE/LC_MESSAGES/*.mo with its own .mo reader (the GNU gettext
binary format: magic 0x950412de in either byte order, revision 0, N strings, the offsets of the
original and translation tables; plural forms are NUL-separated, a context is "ctxt\\x04id").
Per language (the locale without territory and script: pt_BR -> pt, sr@latin -> sr is dropped,
only plain two- or three-letter locales and their _TERRITORY variants are merged):

  * each translation (every plural form) is cleaned: accelerator marks (_ and &) before a
    letter removed, markup and format directives (<b>, %s, {0}, ${var}) replaced by a space,
    whitespace collapsed; strings that equal their English original, have fewer than 3
    letters or more than 160 characters are dropped;
  * deduplicated within the language, and strings that occur in more than one language are
    dropped everywhere (they cannot be told apart);
  * split by source catalog: a catalog (the .mo's domain name, the same name in every locale)
    goes to test when its name's MD5 is 0 mod 5, so test strings come from catalogs never seen
    in training, for every language alike.

Only languages with at least --min-catalogs catalogs are kept. Writes OUT_DIR/train.tsv and
OUT_DIR/test.tsv (columns text, lang; a header line; seeded shuffle, at most --max-train /
--max-test strings per language) and OUT_DIR/languages.json (per language: catalogs, strings
before the caps, train and test counts), and prints that table.

It also writes OUT_DIR/model/, the folder `masque train` (objective classify) starts from: a
character vocabulary for the `wordpiece` tokenizer (every lowercased character seen at least
--min-char-count times in train.tsv, as a word start and as a `##` continuation, so WordPiece
cuts any word into characters) and the config.json of a small BertForSequenceClassification
whose id2label are the languages (config only: trained from scratch).
"""
import argparse
import hashlib
import json
import random
import re
import struct
import sys
from collections import defaultdict
from pathlib import Path


def read_mo(path):
    """(original, translation) pairs of a .mo file; raises ValueError for a broken file."""
    data = Path(path).read_bytes()
    if len(data) < 28:
        raise ValueError("too short for a .mo header")
    for order in ("<", ">"):
        magic, revision, count, orig, trans = struct.unpack(order + "5I", data[:20])
        if magic == 0x950412DE:
            break
    else:
        raise ValueError("not a .mo file (bad magic)")
    if revision >> 16 not in (0, 1):
        raise ValueError(f"unknown .mo revision {revision}")
    pairs = []
    for i in range(count):
        olen, ooff = struct.unpack(order + "2I", data[orig + 8 * i:orig + 8 * i + 8])
        tlen, toff = struct.unpack(order + "2I", data[trans + 8 * i:trans + 8 * i + 8])
        if ooff + olen > len(data) or toff + tlen > len(data):
            raise ValueError(f"string {i} points outside the file")
        pairs.append((data[ooff:ooff + olen], data[toff:toff + tlen]))
    return pairs


def charset(header):
    m = re.search(rb"charset=([A-Za-z0-9_-]+)", header)
    return m.group(1).decode("ascii") if m else "utf-8"


MAX_CHARS = 160  # messages, not whole help texts: the model reads at most 256 tokens
LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
MARKUP = re.compile(r"<[^>]+>|%[-+ #0-9.]*[a-zA-Z]|\{[^}]*\}|\$\{?\w+\}?")


def clean(text):
    text = re.sub(r"[_&](?=\w)", "", text)
    text = MARKUP.sub(" ", text)
    return " ".join(text.split())


def language_of(locale):
    """de, de_DE, pt_BR -> de, de, pt; sr@latin, en@quot, C -> None."""
    m = re.fullmatch(r"([a-z]{2,3})(_[A-Z]{2})?", locale)
    return m.group(1) if m else None


def collect(locales_dir):
    """{lang: {catalog: set(strings)}}"""
    out = defaultdict(lambda: defaultdict(set))
    for mo in sorted(Path(locales_dir).glob("*/LC_MESSAGES/*.mo")):
        lang = language_of(mo.parent.parent.name)
        if lang is None or lang == "en":
            continue
        try:
            pairs = read_mo(mo)
        except (ValueError, struct.error) as e:
            print(f"langid_data: skipping {mo}: {e}", file=sys.stderr)
            continue
        enc = "utf-8"
        for original, translation in pairs:
            if original == b"":
                enc = charset(translation)
        for original, translation in pairs:
            if original == b"" or not translation:
                continue
            english = {clean(o.decode(enc, "replace")) for o in original.split(b"\x04")[-1].split(b"\0")}
            for form in translation.split(b"\0"):
                try:
                    text = clean(form.decode(enc))
                except (UnicodeDecodeError, LookupError):
                    continue
                if (len(LETTER.findall(text)) < 3 or len(text) > MAX_CHARS or text in english
                        or "\t" in text):
                    continue
                out[lang][mo.stem].add(text)
    return out


def write_model(folder, train, langs, min_count):
    counts = defaultdict(int)
    for text, _ in train:
        for c in text.lower():
            if not c.isspace():
                counts[c] += 1
    chars = sorted(c for c, n in counts.items() if n >= min_count)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(v + "\n" for v in vocab), encoding="utf-8")
    config = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
              "vocab_size": len(vocab), "hidden_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 256,
              "max_position_embeddings": 256, "type_vocab_size": 2, "hidden_act": "gelu",
              "layer_norm_eps": 1e-12, "initializer_range": 0.02, "pad_token_id": 0,
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "id2label": {str(i): l for i, l in enumerate(langs)},
              "label2id": {l: i for i, l in enumerate(langs)}}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--locales", default="/usr/share/locale")
    ap.add_argument("--min-catalogs", type=int, default=40)
    ap.add_argument("--max-train", type=int, default=4000)
    ap.add_argument("--max-test", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-char-count", type=int, default=5)
    args = ap.parse_args()
    data = collect(args.locales)
    seen = defaultdict(set)
    for lang, catalogs in data.items():
        for strings in catalogs.values():
            for s in strings:
                seen[s].add(lang)
    is_test = lambda catalog: int(hashlib.md5(catalog.encode()).hexdigest(), 16) % 5 == 0  # noqa
    rng = random.Random(args.seed)
    table, train, test = {}, [], []
    for lang in sorted(data):
        catalogs = data[lang]
        if len(catalogs) < args.min_catalogs:
            continue
        split = {"train": set(), "test": set()}
        for catalog, strings in catalogs.items():
            split["test" if is_test(catalog) else "train"] |= {s for s in strings if len(seen[s]) == 1}
        split["train"] -= split["test"]  # a string in a test catalog is a test string
        rows = {k: sorted(v) for k, v in split.items()}
        for k in rows:
            rng.shuffle(rows[k])
        table[lang] = {"catalogs": len(catalogs), "train_available": len(rows["train"]),
                       "test_available": len(rows["test"]),
                       "train": min(len(rows["train"]), args.max_train),
                       "test": min(len(rows["test"]), args.max_test)}
        train += [(s, lang) for s in rows["train"][:args.max_train]]
        test += [(s, lang) for s in rows["test"][:args.max_test]]
    rng.shuffle(train)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(out / f"{name}.tsv", "w", encoding="utf-8") as f:
            f.write("text\tlang\n")
            f.writelines(f"{t}\t{l}\n" for t, l in rows)
    (out / "languages.json").write_text(json.dumps(table, indent=1) + "\n")
    write_model(out / "model", train, sorted(table), args.min_char_count)
    print("lang catalogs train(avail) test(avail)")
    for lang, t in table.items():
        print(f"{lang:4} {t['catalogs']:8} {t['train']:5} ({t['train_available']}) "
              f"{t['test']:5} ({t['test_available']})")
    print(f"{len(table)} languages, {len(train)} train and {len(test)} test strings")


if __name__ == "__main__":
    main()
