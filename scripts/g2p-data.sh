#!/usr/bin/env bash
# Splits the CMU Pronouncing Dictionary (pocketsphinx-en-us) into train / valid / test for the
# grapheme-to-phoneme experiment and writes the token vocabularies. See docs/g2p.md.
#
#   scripts/g2p-data.sh [OUT_DIR] [DICT]
#     OUT_DIR  default data/g2p in the repository
#     DICT     default /usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict
#
# The split (deterministic, no randomness): the unique headwords (`word(2)` is an alternate
# pronunciation of `word`) sorted in LC_ALL=C byte order and numbered from 0; index % 20 == 0
# is test, index % 20 == 1 is valid, the rest is train. All pronunciations of a word go with it.
#
# Writes into OUT_DIR (replacing what was there, so a rerun gives the same bytes):
#   {train,valid,test}.tsv      `l e t t e r s<TAB>P H O N E S`, one line per pronunciation
#   {train,valid,test}.ref.tsv  `word<TAB>pron 1<TAB>pron 2...`, one line per word (masque eval)
#   {train,valid,test}.words    one word per line, in the same order as .ref.tsv
#   letters.txt  phones.txt     [PAD] [UNK] [CLS] [SEP] [MASK], then the letters / the phones
#   vocab.txt                   [PAD] [UNK] [CLS] [SEP] [MASK], the letters, then the phones
#   tokenizer/tokenizer.json    the joint vocabulary as a Hugging Face tokenizer (and its
#   tokenizer/tokenizer_config.json  special tokens), what the G2P pipelines read
#   stats.txt                   the counts printed at the end
# Bash, coreutils and awk only.
set -euo pipefail
export LC_ALL=C

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/data/g2p}
dict=${2:-/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict}

if [[ ! -r $dict ]]; then
  echo "g2p-data: cannot read the dictionary $dict (install pocketsphinx-en-us: scripts/setup.sh)" >&2
  exit 2
fi
mkdir -p "$out"
tmp=$(mktemp -d "$out/.g2p-data.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 1. Parse and check every line: `word PH ON ES` or `word(N) PH ON ES`. Emits
#    `word<TAB>N<TAB>phones` (N = 1 for the first pronunciation). Stress digits on vowels
#    (AH0, EY1 in the original CMUdict) are stripped; the pocketsphinx dictionary has none.
awk -v dict="$dict" -v stats="$tmp/parse.stats" '
  function fail(msg) { printf "g2p-data: %s:%d: %s\n", dict, NR, msg > "/dev/stderr"; bad = 1; exit 2 }
  {
    sub(/\r$/, "")
    if (NF == 0) fail("empty line")
    if (NF < 2) fail("headword \"" $1 "\" has no phones")
    word = $1; n = 1
    if (match(word, /\([0-9]+\)$/)) {
      n = substr(word, RSTART + 1, RLENGTH - 2) + 0
      word = substr(word, 1, RSTART - 1)
      if (n < 2) fail("alternate number (" n ") must be 2 or more")
    }
    if (word == "") fail("empty headword")
    if (word ~ /[^!-~]/) fail("headword \"" word "\" has bytes outside printable ASCII")
    if (word ~ /[A-Z]/) fail("headword \"" word "\" has upper-case letters (expected the lower-case pocketsphinx dictionary)")
    if ((word SUBSEP n) in seen) fail("\"" $1 "\" appears twice")
    seen[word SUBSEP n] = 1
    phones = ""
    for (i = 2; i <= NF; i++) {
      p = $i
      if (sub(/[012]$/, "", p)) stressed++
      if (p !~ /^[A-Z]+$/) fail("phone \"" $i "\" is not an ARPAbet symbol (A-Z, optional stress digit)")
      phones = phones (i > 2 ? " " : "") p
    }
    printf "%s\t%d\t%s\n", word, n, phones
  }
  END {
    if (bad) exit 2
    if (NR == 0) { printf "g2p-data: %s: the dictionary is empty\n", dict > "/dev/stderr"; exit 2 }
    printf "lines\t%d\nstress_marks_stripped\t%d\n", NR, stressed > stats
  }' "$dict" >"$tmp/parsed"

# 2. Byte order of the headword, then the alternate number: a word and its alternates are
#    adjacent, in the order word, word(2), word(3)...
sort -t $'\t' -k1,1 -k2,2n "$tmp/parsed" >"$tmp/sorted"

# 3. Number the headwords and write the splits. The source side is the headword's characters
#    separated by spaces (every byte is one character: the headwords are ASCII, checked above).
awk -v dir="$tmp" -v stats="$tmp/split.stats" '
  BEGIN { FS = "\t" }
  function split_of(i) { return i % 20 == 0 ? "test" : i % 20 == 1 ? "valid" : "train" }
  function flush() {
    if (prev == "") return
    printf "%s%s\n", prev, refs > (dir "/" s ".ref.tsv")
    print prev > (dir "/" s ".words")
  }
  $1 != prev {
    flush()
    s = split_of(words++); nwords[s]++
    prev = $1; refs = ""; delete pron
    letters = ""
    for (i = 1; i <= length(prev); i++) {
      c = substr(prev, i, 1); letters = letters (i > 1 ? " " : "") c; chars[c] = 1
    }
  }
  ($3 in pron) { dropped++; next }  # the same phones twice once stress marks are gone
  {
    pron[$3] = 1
    refs = refs "\t" $3; nprons[s]++
    printf "%s\t%s\n", letters, $3 > (dir "/" s ".tsv")
    n = split($3, ph, " ")
    for (i = 1; i <= n; i++) phones[ph[i]] = 1
  }
  END {
    flush()
    for (c in chars) print c > (dir "/letters.list")
    for (p in phones) print p > (dir "/phones.list")
    for (k = 1; k <= 3; k++) {
      s = k == 1 ? "train" : k == 2 ? "valid" : "test"
      printf "%s_words\t%d\n%s_pronunciations\t%d\n", s, nwords[s], s, nprons[s] > stats
    }
    printf "words\t%d\nduplicates_dropped\t%d\n", words, dropped > stats
  }' "$tmp/sorted"

# A split can be empty with a tiny dictionary; its files still exist.
for s in train valid test; do
  for ext in tsv ref.tsv words; do touch "$tmp/$s.$ext"; done
done

# 4. Vocabularies. The special tokens come first, in BERT's relative order, at the same ids in
#    all three files: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4. Letters and phones are each in
#    byte order; they cannot collide (letters are lower case or punctuation, phones upper case).
specials=$'[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]'
sort "$tmp/letters.list" >"$tmp/letters.sorted"
sort "$tmp/phones.list" >"$tmp/phones.sorted"
{ echo "$specials"; cat "$tmp/letters.sorted"; } >"$tmp/letters.txt"
{ echo "$specials"; cat "$tmp/phones.sorted"; } >"$tmp/phones.txt"
{ echo "$specials"; cat "$tmp/letters.sorted" "$tmp/phones.sorted"; } >"$tmp/vocab.txt"

# 4b. A tokenizer.json over the joint vocabulary (what `masque train` and pipelines/g2p.yaml
#     read): words split on white space, then a run of upper-case letters is one phone and
#     anything else one character, so `masque` and `m a s q u e` both give the six letters and
#     `K AO R S` four phones. A WordLevel model without an unknown token: a character outside
#     the vocabulary is an error for its record, not a silent [UNK]. [CLS] source [SEP] and
#     [CLS] a [SEP] b [SEP] (type ids 0 / 1) as BERT has them.
mkdir -p "$tmp/tokenizer"
awk '
  function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
  { tok[NR - 1] = $0; n = NR }
  END {
    printf "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
    printf "  \"added_tokens\": ["
    for (i = 0; i < 5; i++)
      printf "%s\n    {\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}", (i ? "," : ""), i, tok[i]
    printf "\n  ],\n  \"normalizer\": null,\n"
    printf "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, "
    printf "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[A-Z]+|.\"}, \"behavior\": \"Isolated\", \"invert\": false}]},\n"
    printf "  \"post_processor\": {\"type\": \"TemplateProcessing\",\n"
    printf "    \"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}],\n"
    printf "    \"pair\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 1}}],\n"
    printf "    \"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [2], \"tokens\": [\"[CLS]\"]}, \"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [3], \"tokens\": [\"[SEP]\"]}}},\n"
    printf "  \"decoder\": null,\n"
    printf "  \"model\": {\"type\": \"WordLevel\", \"vocab\": {"
    for (i = 0; i < n; i++) printf "%s\"%s\": %d", (i ? ", " : ""), esc(tok[i]), i
    printf "}}\n}\n"
  }' "$tmp/vocab.txt" >"$tmp/tokenizer/tokenizer.json"
cat >"$tmp/tokenizer/tokenizer_config.json" <<'JSON'
{"cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "pad_token": "[PAD]"}
JSON

{
  cat "$tmp/parse.stats" "$tmp/split.stats"
  printf "letters\t%d\nphones\t%d\n" "$(wc -l <"$tmp/letters.sorted")" "$(wc -l <"$tmp/phones.sorted")"
} >"$tmp/stats.txt"

# 5. Replace the outputs together.
for f in {train,valid,test}.{tsv,ref.tsv,words} letters.txt phones.txt vocab.txt stats.txt; do
  mv -f "$tmp/$f" "$out/$f"
done
rm -rf "$out/tokenizer"
mv "$tmp/tokenizer" "$out/tokenizer"

awk -F '\t' -v out="$out" '
  { v[$1] = $2 }
  END {
    printf "g2p-data: %s: %d lines, %d headwords\n", out, v["lines"], v["words"]
    printf "  %d stress marks stripped, %d duplicate pronunciations dropped\n", v["stress_marks_stripped"], v["duplicates_dropped"]
    printf "  train %7d words %7d pronunciations\n", v["train_words"], v["train_pronunciations"]
    printf "  valid %7d words %7d pronunciations\n", v["valid_words"], v["valid_pronunciations"]
    printf "  test  %7d words %7d pronunciations\n", v["test_words"], v["test_pronunciations"]
    printf "  vocabularies: %d letters, %d phones (+5 special tokens each)\n", v["letters"], v["phones"]
  }' "$out/stats.txt"
