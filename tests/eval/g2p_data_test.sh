#!/usr/bin/env bash
# Checks scripts/g2p-data.sh: the split rule, alternates kept with their word, counts, the
# vocabularies, idempotence, errors; and that its reference files feed masque eval.
#
#   g2p_data_test.sh synthetic|cmudict G2P_DATA_SH MASQUE_BINARY WORK_DIR
# Exit 0 pass, 1 fail, 77 skipped (cmudict mode without pocketsphinx-en-us).
set -uo pipefail
export LC_ALL=C
mode=$1 script=$2 masque=$3 work=$4
failures=0

check() {  # check DESCRIPTION COMMAND... : the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
same() {  # same DESCRIPTION EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    echo "ok: $1"
  else
    printf 'FAIL: %s\n--- expected\n%s\n--- actual\n%s\n' "$1" "$2" "$3"
    failures=$((failures + 1))
  fi
}
contains() { [[ $1 == *"$2"* ]]; }
stat_of() { awk -F '\t' -v k="$2" '$1 == k { print $2 }' "$1/stats.txt"; }
digest() { (cd "$1" && cat {train,valid,test}.{tsv,ref.tsv,words} letters.txt phones.txt vocab.txt stats.txt | md5sum); }

rm -rf "$work"
mkdir -p "$work"

# Scoring the first reference of every word against all of them is perfect.
eval_self() {  # eval_self REFS
  cut -f2 "$1" >"$work/self.hyp"
  "$masque" eval --ref "$1" "$work/self.hyp" --json
}

synthetic() {
  # 41 headwords. Byte order: 'em a a's a. kaa ... kaz kba ... kbk, so index 0 is 'em, 20 is kaq,
  # 40 is kbk (test) and 1 is a, 21 is kar (valid). The file lists them in reverse, alternates
  # before their base word; kaq(2) and kar carry stress digits, and kar(2) equals kar without.
  local dict=$work/synthetic.dict
  {
    for w in kb{k,j,i,h,g,f,e,d,c,b,a} ka{z,y,x,w,v,u,t,s}; do echo "$w K AA"; done
    echo "kar(2) K AA0 R"
    echo "kar K AA1 R"
    echo "kaq(2) K AH1 K"
    echo "kaq K AE K"
    for w in ka{p,o,n,m,l,k,j,i,h,g,f,e,d,c,b,a}; do echo "$w K AA"; done
    echo "a. EY"
    echo "a's EY Z"
    echo "a(3) EY Y"
    echo "a(2) AH"
    echo "a EY"
    echo "'em AH M"
  } >"$dict"
  local out=$work/out
  check "the script runs" "$script" "$out" "$dict"

  same "test words: index % 20 == 0 in byte order" "'em
kaq
kbk" "$(cat "$out/test.words")"
  same "valid words: index % 20 == 1" "a
kar" "$(cat "$out/valid.words")"
  same "train words: the other 36, in byte order" "36 a's a. kaa kap kas kbj" \
    "$(wc -l <"$out/train.words") $(sed -n '1p;2p;3p;18p;19p;36p' "$out/train.words" | tr '\n' ' ' | sed 's/ $//')"
  same "test references: alternates with their word, in alternate order, stress stripped" \
    "'em	AH M
kaq	K AE K	K AH K
kbk	K AA" "$(cat "$out/test.ref.tsv")"
  same "valid references: a(3) after a(2); kar(2) = kar once stress is gone, kept once" "a	EY	AH	EY Y
kar	K AA R" "$(cat "$out/valid.ref.tsv")"
  same "test pairs: letters and phones, one line per pronunciation" "' e m	AH M
k a q	K AE K
k a q	K AH K
k b k	K AA" "$(cat "$out/test.tsv")"
  same "counts" "45 41 36 36 2 4 3 4 3 1" \
    "$(for k in lines words train_words train_pronunciations valid_words valid_pronunciations test_words test_pronunciations stress_marks_stripped duplicates_dropped; do stat_of "$out" $k; done | tr '\n' ' ' | sed 's/ $//')"
  same "pronunciations add up: lines - duplicates" "44" "$(cat "$out"/{train,valid,test}.tsv | wc -l)"
  same "letters.txt: specials, then every character of the headwords in byte order" \
    "[PAD] [UNK] [CLS] [SEP] [MASK] ' . a b c d e f g h i j k l m n o p q r s t u v w x y z" \
    "$(tr '\n' ' ' <"$out/letters.txt" | sed 's/ $//')"
  same "phones.txt" "[PAD] [UNK] [CLS] [SEP] [MASK] AA AE AH EY K M R Y Z" \
    "$(tr '\n' ' ' <"$out/phones.txt" | sed 's/ $//')"
  same "vocab.txt = specials + letters + phones" \
    "$( (cat "$out/letters.txt"; tail -n +6 "$out/phones.txt") | md5sum)" "$(md5sum <"$out/vocab.txt")"

  local before
  before=$(digest "$out")
  "$script" "$out" "$dict" >/dev/null
  same "a second run writes the same bytes" "$before" "$(digest "$out")"
  check "no temporary directory is left" test -z "$(find "$out" -name '.g2p-data.*')"

  # Bad dictionaries: exit 2 and the line named.
  printf 'ok AH\nbad\n' >"$work/bad1.dict"
  printf 'ok AH\nok(2) AH\nx y z\n' >"$work/bad2.dict"
  printf 'ok AH\nok AE\n' >"$work/bad3.dict"
  printf 'ok AH\ncaf\xc3\xa9 K AE F EY\n' >"$work/bad4.dict"
  local n msg rc want
  for n in 1 2 3 4; do
    msg=$("$script" "$work/bad$n" "$work/bad$n.dict" 2>&1 >/dev/null)
    rc=$?
    case $n in
      1) want='bad1.dict:2: headword "bad" has no phones' ;;
      2) want='bad2.dict:3: phone "y" is not an ARPAbet symbol' ;;
      3) want='bad3.dict:2: "ok" appears twice' ;;
      4) want='bad4.dict:2: headword "café" has bytes outside printable ASCII' ;;
    esac
    check "bad dictionary $n: exit 2 ($rc) naming the line ($msg)" test "$rc" -eq 2
    check "bad dictionary $n: the message" contains "$msg" "$want"
  done

  # The references feed masque eval: themselves score 0; a known mistake scores as computed
  # by hand (kaq: 1 edit to K AE K, the first of two equally close references).
  check "masque eval: first references against all: WER 0" \
    grep -q '"words":3,"correct":3,"wer":0.0,"edits":0,"ref_tokens":7' <(eval_self "$out/test.ref.tsv")
  printf 'AH M\nK AA K\nK AA\n' >"$work/wrong.hyp"
  local json
  json=$("$masque" eval --ref "$out/test.ref.tsv" "$work/wrong.hyp" --json)
  check "masque eval: one substitution in kaq ($json)" \
    grep -q '"words":3,"correct":2,.*"edits":1,"ref_tokens":7' <<<"$json"
  json=$("$masque" eval --ref "$out/test.tsv" "$work/wrong.hyp" --json)
  check "masque eval: the pairs file gives the same scores ($json)" \
    grep -q '"words":3,"correct":2,.*"edits":1,"ref_tokens":7' <<<"$json"
}

cmudict() {
  local dict=/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict
  if [[ ! -r $dict ]]; then
    echo "skipped: $dict is absent (install pocketsphinx-en-us, e.g. with scripts/setup.sh)"
    exit 77
  fi
  local out=$work/out
  check "the script runs" "$script" "$out"
  # The rule, recomputed independently from the dictionary.
  cut -d ' ' -f1 "$dict" | sed 's/([0-9]*)$//' | sort -u >"$work/headwords"
  check "test = every 20th headword from the first" cmp -s <(awk 'NR % 20 == 1' "$work/headwords") "$out/test.words"
  check "valid = the next ones" cmp -s <(awk 'NR % 20 == 2' "$work/headwords") "$out/valid.words"
  check "train = the rest" cmp -s <(awk 'NR % 20 != 1 && NR % 20 != 2' "$work/headwords") "$out/train.words"
  check "no word in two splits" test -z "$(sort "$out"/{train,valid,test}.words | uniq -d)"
  same "headwords, lines and per-split counts" "125945 134723 113349 6298 6298 121217 6754 6752" \
    "$(for k in words lines train_words valid_words test_words train_pronunciations valid_pronunciations test_pronunciations; do stat_of "$out" $k; done | tr '\n' ' ' | sed 's/ $//')"
  same "every dictionary line is one training pair" "$(wc -l <"$dict")" "$(cat "$out"/{train,valid,test}.tsv | wc -l)"
  same "no stress marks in the pocketsphinx dictionary, no duplicates" "0 0" \
    "$(stat_of "$out" stress_marks_stripped) $(stat_of "$out" duplicates_dropped)"
  same "vocabulary sizes: 36 characters, 39 ARPAbet phones, 5 specials each" "41 44 80" \
    "$(wc -l <"$out/letters.txt") $(wc -l <"$out/phones.txt") $(wc -l <"$out/vocab.txt")"
  local before
  before=$(digest "$out")
  "$script" "$out" >/dev/null
  same "a second run writes the same bytes" "$before" "$(digest "$out")"
  check "masque eval: the test references against themselves: WER 0" \
    grep -q '"words":6298,"correct":6298,"wer":0.0,"edits":0' <(eval_self "$out/test.ref.tsv")
}

case $mode in
  synthetic) synthetic ;;
  cmudict) cmudict ;;
  *) echo "usage: $0 synthetic|cmudict G2P_DATA_SH MASQUE WORK_DIR" >&2; exit 2 ;;
esac
echo "$failures failure(s)"
[[ $failures -eq 0 ]]
