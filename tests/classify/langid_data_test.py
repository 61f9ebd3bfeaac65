#!/usr/bin/env python3
"""scripts/langid_data.py on a made-up locale tree (docs/langid.md): its .mo reader, the split by
catalog (test and validation strings never in training), the balanced training file, the
vocabulary and the promise that the test set does not depend on the other options.

Usage: langid_data_test.py SCRIPT SCRATCH_DIR   (exit 0 when every check holds)
"""
import hashlib
import importlib.util
import shutil
import struct
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path


def write_mo(path, pairs, order="<"):
    """A GNU .mo file (revision 0) of (original, translation) byte strings, sorted as msgfmt."""
    pairs = sorted(pairs)
    n = len(pairs)
    header = 28
    orig_table, trans_table = header, header + 8 * n
    offset = trans_table + 8 * n
    blobs, orig_entries, trans_entries = [], [], []
    for o, _ in pairs:
        orig_entries.append((len(o), offset))
        blobs.append(o + b"\0")
        offset += len(o) + 1
    for _, t in pairs:
        trans_entries.append((len(t), offset))
        blobs.append(t + b"\0")
        offset += len(t) + 1
    data = struct.pack(order + "7I", 0x950412DE, 0, n, orig_table, trans_table, 0, offset)
    data += b"".join(struct.pack(order + "2I", *e) for e in orig_entries + trans_entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data + b"".join(blobs))


def digest(catalog):
    return int(hashlib.md5(catalog.encode()).hexdigest(), 16)


def catalog_names():
    """Twelve catalog names: at least two test, two validation and four training catalogs."""
    test, valid, train = [], [], []
    i = 0
    while len(test) < 2 or len(valid) < 2 or len(train) < 8:
        name = f"app{i}"
        d = digest(name)
        (test if d % 5 == 0 else valid if d // 5 % 10 == 0 else train).append(name)
        i += 1
    return test[:2], valid[:2], train[:8]


WORDS = {
    "de": "datei öffnen speichern fenster schließen drucken einstellungen hilfe".split(),
    "fr": "fichier ouvrir enregistrer fenêtre fermer imprimer paramètres aide".split(),
    "pt_BR": "arquivo abrir salvar janela fechar imprimir configurações ajuda".split(),
}


def build_tree(root, test, valid, train):
    """Locales de, fr and pt_BR, one .mo per catalog; every string names its catalog."""
    strings = defaultdict(lambda: defaultdict(set))  # lang -> catalog -> strings
    for li, (locale, words) in enumerate(sorted(WORDS.items())):
        lang = locale.split("_")[0]
        for ci, catalog in enumerate(test + valid + train):
            count = 3 + ci % 4 + (10 if lang == "fr" else 0)  # fr has the most strings
            pairs = [(b"", b"Content-Type: text/plain; charset=UTF-8\n")]
            for k in range(count):
                text = f"{words[k % 8]} {words[(k + ci) % 8]} {catalog} nr{k}"
                pairs.append((f"msg {catalog} {k}".encode(), text.encode()))
                strings[lang][catalog].add(text)
            # A plural (two forms) and a context: both forms are strings of the language.
            plural = (f"{words[0]} {catalog} eins", f"{words[1]} {catalog} zwei")
            pairs.append((b"one file\0many files", "\0".join(plural).encode()))
            pairs.append((b"menu\x04Open", f"{words[2]} {catalog} kontext".encode()))
            strings[lang][catalog] |= {*plural, f"{words[2]} {catalog} kontext"}
            # Dropped: equal to the English original, and too few letters.
            pairs.append((b"Firefox", b"Firefox"))
            pairs.append((b"OK", b"OK"))
            order = ">" if (li + ci) % 2 else "<"  # both byte orders
            write_mo(root / locale / "LC_MESSAGES" / f"{catalog}.mo", pairs, order)
    # Not a language: left out.
    write_mo(root / "sr@latin" / "LC_MESSAGES" / "app0.mo", [(b"x", b"nothing here")])
    return strings


def read_tsv(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "text\tlang", f"{path}: header {lines[0]!r}"
    return [tuple(line.split("\t")) for line in lines[1:]]


def check(condition, message):
    if not condition:
        sys.exit(f"langid_data_test: FAILED: {message}")


def main():
    script, scratch = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.rmtree(scratch, ignore_errors=True)
    test_cat, valid_cat, train_cat = catalog_names()
    strings = build_tree(scratch / "locale", test_cat, valid_cat, train_cat)

    spec = importlib.util.spec_from_file_location("langid_data", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # The reader gives back what was written, in both byte orders.
    pairs = [(b"", b"x"), (b"a\0b", b"c\0d"), (b"ctx\x04e", b"f")]
    for order in "<>":
        write_mo(scratch / f"rt{order == '>'}.mo", pairs, order)
        check(mod.read_mo(scratch / f"rt{order == '>'}.mo") == sorted(pairs),
              f"read_mo round trip, byte order {order}")
    (scratch / "bad.mo").write_bytes(b"\0" * 40)
    try:
        mod.read_mo(scratch / "bad.mo")
        check(False, "read_mo accepted a file without the magic number")
    except ValueError:
        pass
    check(mod.bert_words("Datei «konnte» nicht: 文件 l'homme") ==
          ["datei", "«", "konnte", "»", "nicht", ":", "文", "件", "l", "'", "homme"],
          "bert_words cuts as BERT's pre-tokenizer")

    def run(out, *options):
        subprocess.run([sys.executable, str(script), str(out), "--locales",
                        str(scratch / "locale"), "--min-catalogs", "5", "--min-char-count", "1",
                        "--max-test", "6", *options], check=True, stdout=subprocess.DEVNULL)
        return {name: read_tsv(out / f"{name}.tsv") for name in ("train", "valid", "test")}

    a = run(scratch / "a")
    langs = {"de", "fr", "pt"}
    by = lambda rows: {l: [t for t, x in rows if x == l] for l in langs}  # noqa
    train, valid, test = by(a["train"]), by(a["valid"]), by(a["test"])
    for lang in langs:
        own = strings[lang]
        in_test = set().union(*(own[c] for c in test_cat))
        in_valid = set().union(*(own[c] for c in valid_cat))
        in_train = set().union(*(own[c] for c in train_cat))
        check(set(test[lang]) <= in_test and len(test[lang]) == 6, f"{lang}: test strings")
        check(set(valid[lang]) == in_valid, f"{lang}: validation = the validation catalogs")
        check(set(train[lang]) == in_train, f"{lang}: training = every training-catalog string")
        check(not set(train[lang]) & (in_test | in_valid), f"{lang}: held-out string in training")
    counts = Counter(l for _, l in a["train"])
    check(len(set(counts.values())) == 1, f"balanced training rows per language: {counts}")
    check(counts["de"] == len(set(train["fr"])), "balanced up to the largest language")
    check(not any(t in ("Firefox", "OK") for t, _ in a["test"] + a["train"]),
          "strings equal to the original or with fewer than 3 letters are dropped")

    vocab = (scratch / "a" / "model" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    check(vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "special tokens first")
    check(len(vocab) == len(set(vocab)), "no duplicate vocabulary entries")
    for c in "öêç":
        check(c in vocab and "##" + c in vocab, f"character {c} as start and continuation")
    check("configurações" in vocab and "speichern" in vocab, "frequent words are pieces")
    check(any(v.startswith("##") and len(v) > 3 for v in vocab), "## n-grams are pieces")
    config = (scratch / "a" / "model" / "config.json").read_text()
    check(f'"vocab_size": {len(vocab)}' in config, "config.json's vocab_size is the vocabulary's")

    # The same files again, and the same test set whatever the other options.
    again = run(scratch / "b")
    check(again == a, "two runs write the same files")
    other = run(scratch / "c", "--no-balance", "--max-train", "4", "--vocab", "chars")
    check(other["test"] == a["test"], "the test set does not depend on the other options")
    check(len(other["train"]) == 12, "--max-train caps each language, --no-balance repeats none")
    print("langid_data_test: all checks passed")


if __name__ == "__main__":
    main()
