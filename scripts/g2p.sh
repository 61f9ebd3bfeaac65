#!/usr/bin/env bash
# The G2P experiment end to end for one model (docs/g2p.md): the data split (if missing), a
# from-scratch training run by `masque train` (25-minute budget), and the test-split scores with
# greedy search and beam 4 by `masque eval`. Progress goes to the terminal; logs, the run folder
# and the hypotheses stay in data/g2p/ (git-ignored).
#
#   scripts/g2p.sh MODEL [masque train options...]
#     MODEL  unilm | causal | plm | encdec | rnn | diffusion | block-diffusion
#            (pipelines/train-g2p-MODEL.yaml)
#   e.g. scripts/g2p.sh unilm --threads 2
#        scripts/g2p.sh causal --threads 2 --set task.max_minutes=10
#
# A finished run is not retrained: remove data/g2p/runs/MODEL to start again, or continue an
# interrupted one with `masque train pipelines/train-g2p-MODEL.yaml --resume data/g2p/runs/MODEL`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
masque=${MASQUE:-$root/build/bin/masque}
model=${1:-}
pipeline=$root/pipelines/g2p.yaml
case $model in
  unilm) mask=(--set mask.plugin=seq2seq) ;;
  causal) mask=(--set mask.plugin=causal) ;;
  encdec) mask=(); pipeline=$root/pipelines/g2p-encdec.yaml ;;
  rnn) mask=(); pipeline=$root/pipelines/g2p-rnn.yaml ;;
  plm) mask=(); pipeline=$root/pipelines/g2p-plm.yaml ;;
  diffusion) mask=(); pipeline=$root/pipelines/g2p-diffusion.yaml ;;
  block-diffusion)
    mask=(--set mask.plugin=block-causal --set mask.block_size=4)
    pipeline=$root/pipelines/g2p-diffusion.yaml ;;
  *) echo "usage: scripts/g2p.sh unilm|causal|plm|encdec|rnn|diffusion|block-diffusion [masque train options...]" >&2; exit 2 ;;
esac
shift
[[ -x $masque ]] || { echo "g2p: $masque is not built (scripts/setup.sh)" >&2; exit 2; }
data=$root/data/g2p
[[ -f $data/train.tsv && -f $data/tokenizer/tokenizer.json ]] || "$root/scripts/g2p-data.sh"
mkdir -p "$data/logs" "$data/eval"
run=$data/runs/$model

if [[ ! -e $run/last ]]; then
  echo "g2p: training $model (log: $data/logs/$model.log)" >&2
  "$masque" train "$root/pipelines/train-g2p-$model.yaml" "$@" 2>&1 | tee "$data/logs/$model.log"
fi

# The permutation-LM model fills a template per word: its letters are given, then
# (letters + 3) [MASK] slots (the slack of pipelines/train-g2p-plm.yaml), filled left to right
# or most-confident first; the phones are the `infill`, the [SEP] fillers dropped.
inputs=$data/test.words
decodings=(greedy beam4)
field=text
if [[ $model == plm ]]; then
  inputs=$data/eval/test.templates
  awk '{ t = $0 " [SEP]"; for (i = 0; i < length($0) + 3; ++i) t = t " [MASK]"; print t }' \
    "$data/test.words" >"$inputs"
  decodings=(greedy beam4 confidence.greedy confidence.beam4)
  field=infill
fi
# The diffusion models at several step counts T: every slot at once (T1) ... one per step (Tall).
if [[ $model == *diffusion ]]; then
  decodings=(T1 T2 T4 Tall)
fi

for decoding in "${decodings[@]}"; do
  sets=(--set "model.path=$run/best" --set "tokenizer.path=$run/best" "${mask[@]}")
  [[ $decoding == *beam4 ]] && sets+=(--set decoder.plugin=beam --set decoder.beam_size=4)
  [[ $decoding == confidence.* ]] && sets+=(--set task.order_by=confidence)
  [[ $decoding == T[0-9]* ]] && sets+=(--set "task.steps=${decoding#T}")
  [[ $decoding == Tall ]] && sets+=(--set task.steps=0)
  start=$(date +%s.%N)
  "$masque" run "$pipeline" "${sets[@]}" -i "$inputs" -o "$data/eval/$model.$decoding.jsonl"
  end=$(date +%s.%N)
  words=$(wc -l <"$data/test.words")
  echo "g2p: $model $decoding: $(awk -v w="$words" -v a="$start" -v b="$end" 'BEGIN { printf "%.0f words/s", w / (b - a) }')" >&2
  "$masque" eval --ref "$data/test.ref.tsv" "$data/eval/$model.$decoding.jsonl" --field "$field" \
    --token-name phone
done
