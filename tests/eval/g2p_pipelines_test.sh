#!/usr/bin/env bash
# Every committed G2P pipeline, end to end on a small synthetic dictionary: scripts/g2p-data.sh
# splits it, each pipelines/train-g2p-MODEL.yaml trains a few steps from scratch, and the matching
# inference pipeline (g2p.yaml, g2p-plm.yaml, g2p-encdec.yaml) gives exactly one record per input
# word, in order, phones only, and a per-record error for a character outside the letters.
#
#   g2p_pipelines_test.sh SOURCE_DIR MASQUE_BINARY WORK_DIR
set -uo pipefail
export LC_ALL=C
src=$1 masque=$2 work=$3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

rm -rf "$work"
mkdir -p "$work"
# 80 headwords from four syllables, two letters and two phones each.
declare -A phones=([ba]="B AA" [ko]="K OW" [ti]="T IY" [mu]="M UW")
{
  for a in ba ko ti mu; do
    for b in ba ko ti mu; do
      echo "$a$b ${phones[$a]} ${phones[$b]}"
      for c in ba ko ti mu; do echo "$a$b$c ${phones[$a]} ${phones[$b]} ${phones[$c]}"; done
    done
  done
} >"$work/dict"
data=$work/data
"$src/scripts/g2p-data.sh" "$data" "$work/dict" >"$work/data.log" 2>&1 || { cat "$work/data.log"; exit 1; }
printf 'bako\ntimuko\nbaé\nkomu\n' >"$work/words"

for model in unilm causal plm encdec; do
  run=$work/runs/$model
  if ! "$masque" train "$src/pipelines/train-g2p-$model.yaml" -q --set "task.train_file=$data/train.tsv" \
    --set "task.valid_file=$data/valid.tsv" --set "task.output=$run" --set task.steps=3 \
    --set task.warmup_steps=1 --set task.valid_every=3 --set task.batch_size=8 \
    --set "tokenizer.path=$data/tokenizer" >"$work/$model.train.log" 2>&1; then
    fail "$model: training"; cat "$work/$model.train.log"; continue
  fi
  [[ -f $run/best/model.safetensors ]] && ok "$model: trained, best checkpoint written" ||
    fail "$model: no best checkpoint"

  input=$work/words field=text sets=()
  case $model in
    unilm) pipeline=g2p.yaml ;;
    causal) pipeline=g2p.yaml sets=(--set mask.plugin=causal) ;;
    encdec) pipeline=g2p-encdec.yaml ;;
    plm)
      pipeline=g2p-plm.yaml field=infill input=$work/templates
      awk '{ t = $0 " [SEP]"; for (i = 0; i < length($0) + 3; ++i) t = t " [MASK]"; print t }' \
        "$work/words" >"$input" ;;
  esac
  "$masque" run "$src/pipelines/$pipeline" --set "model.path=$run/best" \
    --set "tokenizer.path=$run/best" "${sets[@]}" -i "$input" -o "$work/$model.jsonl" \
    2>"$work/$model.run.err"
  status=$?
  [[ $status == 1 ]] && ok "$model: exit 1 (one record failed)" || fail "$model: exit $status, expected 1"
  records=$(wc -l <"$work/$model.jsonl")
  [[ $records == 4 ]] && ok "$model: one output per word" || fail "$model: $records outputs for 4 words"
  ids=$(sed 's/^{"id":\([0-9]*\),.*/\1/' "$work/$model.jsonl" | tr '\n' ' ')
  [[ $ids == "0 1 2 3 " ]] && ok "$model: in input order" || fail "$model: ids $ids"
  grep -q "^{\"id\":2,\"error\":\".*'é' is not in the" "$work/$model.jsonl" &&
    ok "$model: the bad word's record is an error naming the character" ||
    { fail "$model: no per-record error for é"; sed -n 3p "$work/$model.jsonl"; }
  with_field=$(grep -c "\"$field\":\"" "$work/$model.jsonl")
  [[ $with_field == 3 ]] && ok "$model: the 3 good words have a '$field'" ||
    fail "$model: $with_field records with a '$field'"
  # Phones only: upper-case ARPAbet tokens (what a 3-step model says is not checked).
  bad=$(sed -n "s/.*\"$field\":\"\\([^\"]*\\)\".*/\\1/p" "$work/$model.jsonl" | tr ' ' '\n' |
    grep -v '^$' | grep -cv '^[A-Z][A-Z]*$')
  [[ $bad == 0 ]] && ok "$model: $field holds phones only" || fail "$model: $bad non-phone tokens in $field"
done

echo "$failures failure(s)"
[[ $failures == 0 ]]
