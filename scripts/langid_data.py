#!/usr/bin/env python3
"""Language-identification data from the gettext catalogs Debian installs (docs/langid.md).

Usage: scripts/langid_data.py OUT_DIR [--locales /usr/share/locale] [--min-catalogs 40]
                                      [--max-train 0] [--max-test 600] [--max-valid 300]
                                      [--no-balance] [--vocab pieces|chars] [--hidden 128] ...

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
    in training, for every language alike; of the other catalogs, those whose MD5 / 5 is 0
    mod 10 are validation catalogs (valid.tsv: for choosing settings without the test set).

Only languages with at least --min-catalogs catalogs are kept. Writes OUT_DIR/train.tsv,
OUT_DIR/valid.tsv and OUT_DIR/test.tsv (columns text, lang; a header line; seeded shuffle, at
most --max-train (0: all) / --max-valid / --max-test strings per language) and
OUT_DIR/languages.json (per language: catalogs, strings before the caps, train, valid and test
counts), and prints that table. The test set is the one the first run used (same catalogs, same
seeded choice of 600 strings), whatever the other options. Training strings are balanced by
sampling (unless --no-balance): every language's strings are repeated, each repetition in a new
seeded order, up to the count of the largest language, so every language is drawn equally often
(the test set has as many strings of each) and no string is thrown away.

It also writes OUT_DIR/model/, the folder `masque train` (objective classify) starts from: a
vocabulary for the `wordpiece` tokenizer and the config.json of a small
BertForSequenceClassification whose id2label are the languages (config only: trained from
scratch). The vocabulary holds every lowercased character seen at least --min-char-count times
in train.tsv, as a word start and as a `##` continuation (so WordPiece can cut any word), and
with --vocab pieces (the default) also character n-grams that tell languages apart, as
fastText's and CLD2's features do: per language, its --words most frequent words, its
--prefixes most frequent word beginnings (2-8 characters) and its --suffixes most frequent
word-internal n-grams (2-5 characters, as `##` pieces), each seen at least 3 times; words are
cut as the `wordpiece` tokenizer cuts them (whitespace, punctuation and CJK ideographs apart,
lowercased, accents kept). WordPiece's longest-match-first then reads frequent words as one
token and others as a stem and an ending.
"""
import argparse
import hashlib
import json
import random
import re
import struct
import sys
import unicodedata
from collections import Counter, defaultdict
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


def is_cjk(c):
    """Hugging Face's is_chinese_char: the ideographs BERT's tokenizer isolates."""
    o = ord(c)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0x20000 <= o <= 0x2A6DF
            or 0x2A700 <= o <= 0x2B73F or 0x2B740 <= o <= 0x2B81F or 0x2B920 <= o <= 0x2CEAF
            or 0xF900 <= o <= 0xFAFF or 0x2F800 <= o <= 0x2FA1F)


def bert_words(text):
    """The words BERT's pre-tokenizer makes of `text`, lowercased (accents kept)."""
    words, word = [], []

    def end_word():
        if word:
            words.append("".join(word))
            word.clear()

    for c in text:
        cat = unicodedata.category(c)
        if c.isspace():
            end_word()
        elif cat in ("Cc", "Cf", "Co"):
            continue
        elif cat.startswith("P") or (c < "\x80" and not c.isalnum()) or is_cjk(c):
            end_word()
            words.append(c.lower())
        else:
            word.append(c.lower())
    end_word()
    return words


def ngram_pieces(train, chars, words, prefixes, suffixes):
    """Per language its most frequent words, word beginnings and word-internal n-grams."""
    by_lang = defaultdict(Counter)
    for text, lang in train:
        by_lang[lang].update(w for w in bert_words(text) if len(w) > 1)
    pieces = set()
    for lang, counts in sorted(by_lang.items()):
        starts, inner = Counter(), Counter()
        for w, n in counts.items():
            for k in range(2, min(len(w) - 1, 8) + 1):
                starts[w[:k]] += n
            for i in range(1, len(w) - 1):
                for k in range(2, min(len(w) - i, 5) + 1):
                    inner[w[i:i + k]] += n
        for counter, top, prefix in ((counts, words, ""), (starts, prefixes, ""),
                                     (inner, suffixes, "##")):
            for piece, n in counter.most_common(top):
                if n >= 3 and all(c in chars for c in piece):
                    pieces.add(prefix + piece)
    return sorted(pieces)


def write_model(folder, train, langs, args):
    counts = defaultdict(int)
    for text, _ in train:
        for c in text.lower():
            if not c.isspace():
                counts[c] += 1
    chars = sorted(c for c, n in counts.items() if n >= args.min_char_count)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    if args.vocab == "pieces":
        have = set(vocab)
        vocab += [p for p in ngram_pieces(train, set(chars), args.words, args.prefixes,
                                          args.suffixes) if p not in have]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(v + "\n" for v in vocab), encoding="utf-8")
    config = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
              "vocab_size": len(vocab), "hidden_size": args.hidden,
              "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
              "intermediate_size": args.ffn, "max_position_embeddings": 256,
              "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
              "initializer_range": 0.02, "pad_token_id": 0,
              "hidden_dropout_prob": args.dropout, "attention_probs_dropout_prob": args.dropout,
              "id2label": {str(i): l for i, l in enumerate(langs)},
              "label2id": {l: i for i, l in enumerate(langs)}}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return len(vocab)


def balanced(rows_by_lang, rng):
    """Every language's rows repeated (each pass reshuffled) up to the largest language's count."""
    target = max(len(r) for r in rows_by_lang.values())
    out = []
    for lang, rows in sorted(rows_by_lang.items()):
        picked = list(rows)
        while len(picked) < target:
            extra = list(rows)
            rng.shuffle(extra)
            picked += extra[:target - len(picked)]
        out += [(s, lang) for s in picked]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--locales", default="/usr/share/locale")
    ap.add_argument("--min-catalogs", type=int, default=40)
    ap.add_argument("--max-train", type=int, default=0, help="per language, 0: all")
    ap.add_argument("--max-valid", type=int, default=300)
    ap.add_argument("--max-test", type=int, default=600)
    ap.add_argument("--no-balance", dest="balance", action="store_false")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-char-count", type=int, default=5)
    ap.add_argument("--vocab", choices=("pieces", "chars"), default="pieces")
    ap.add_argument("--words", type=int, default=600, help="whole words per language")
    ap.add_argument("--prefixes", type=int, default=300, help="word beginnings per language")
    ap.add_argument("--suffixes", type=int, default=300, help="## n-grams per language")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args()
    data = collect(args.locales)
    seen = defaultdict(set)
    for lang, catalogs in data.items():
        for strings in catalogs.values():
            for s in strings:
                seen[s].add(lang)
    digest = lambda catalog: int(hashlib.md5(catalog.encode()).hexdigest(), 16)  # noqa
    is_test = lambda catalog: digest(catalog) % 5 == 0  # noqa
    is_valid = lambda catalog: not is_test(catalog) and digest(catalog) // 5 % 10 == 0  # noqa
    rng = random.Random(args.seed)
    table, train_by_lang, valid, test = {}, {}, [], []
    for lang in sorted(data):
        catalogs = data[lang]
        if len(catalogs) < args.min_catalogs:
            continue
        split = {"train": set(), "test": set()}
        held_out = set()
        for catalog, strings in catalogs.items():
            unique = {s for s in strings if len(seen[s]) == 1}
            split["test" if is_test(catalog) else "train"] |= unique
            if is_valid(catalog):
                held_out |= unique
        split["train"] -= split["test"]  # a string in a test catalog is a test string
        rows = {k: sorted(v) for k, v in split.items()}
        for k in rows:  # the first run's draws: the same test strings whatever the options
            rng.shuffle(rows[k])
        # Validation strings come out of the training strings after the draws above.
        rows["valid"] = [s for s in rows["train"] if s in held_out]
        rows["train"] = [s for s in rows["train"] if s not in held_out]
        caps = {"train": args.max_train or len(rows["train"]), "valid": args.max_valid,
                "test": args.max_test}
        table[lang] = {"catalogs": len(catalogs)}
        for k in ("train", "valid", "test"):
            table[lang][k + "_available"] = len(rows[k])
            rows[k] = rows[k][:caps[k]]
            table[lang][k] = len(rows[k])
        train_by_lang[lang] = rows["train"]
        valid += [(s, lang) for s in rows["valid"]]
        test += [(s, lang) for s in rows["test"]]
    sampler = random.Random(args.seed + 1)
    if args.balance:
        train = balanced(train_by_lang, sampler)
    else:
        train = [(s, lang) for lang, rows in sorted(train_by_lang.items()) for s in rows]
    sampler.shuffle(train)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("valid", valid), ("test", test)):
        with open(out / f"{name}.tsv", "w", encoding="utf-8") as f:
            f.write("text\tlang\n")
            f.writelines(f"{t}\t{l}\n" for t, l in rows)
    (out / "languages.json").write_text(json.dumps(table, indent=1) + "\n")
    distinct = [(s, lang) for lang, rows in sorted(train_by_lang.items()) for s in rows]
    vocab_size = write_model(out / "model", distinct, sorted(table), args)
    print("lang catalogs train(avail) valid(avail) test(avail)")
    for lang, t in table.items():
        print(f"{lang:4} {t['catalogs']:8} {t['train']:6} ({t['train_available']}) "
              f"{t['valid']:5} ({t['valid_available']}) {t['test']:5} ({t['test_available']})")
    print(f"{len(table)} languages, {len(distinct)} distinct training strings "
          f"({len(train)} rows{' balanced' if args.balance else ''}), {len(valid)} valid and "
          f"{len(test)} test strings; vocabulary of {vocab_size} tokens")


if __name__ == "__main__":
    main()
