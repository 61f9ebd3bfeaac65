#!/usr/bin/env bash
# int8 against f32 (and bf16) on every model int8 must not slow down (issue 23): the models of
# ../shared and the benchmarks' (bench/encdec's aren work, bench/lm's GPT-2-small scoring),
# masque alone, one worker thread, the three matmul types interleaved in each round (each round
# starting one type later) so that they see the same machine load. Prints a markdown table of
# medians and whether int8 <= f32 in every cell (exit 1 when not).
#
#   bench/int8/run.sh [BUILD_DIR] [CASE...]   (default: build; cases: all of them, see below)
#   environment: ROUNDS=3, DTYPES="f32 int8 bf16", SCRATCH=BUILD_DIR/bench/int8 (inputs, the
#                GPT-2-small model: ~500 MB, written on first use by bench/lm/make_model.py),
#                APPEND=0 (1: add to the timings of earlier calls, e.g. one case per call under
#                a benchmark lock, and report them all)
#
# A cell's figure is the corpus seconds of `masque run --summary` (model load excluded), median
# over rounds; the whole-process wall time and CPU time (load included) are printed as well.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ $# -gt 0 ] && shift
rounds=${ROUNDS:-3}
dtypes=${DTYPES:-f32 int8 bf16}
scratch=${SCRATCH:-$build/bench/int8}
shared=$root/../shared
masque=$build/bin/masque
python=/usr/bin/python3
[ -x "$masque" ] || { echo "run.sh: $masque not found (build first)" >&2; exit 2; }
mkdir -p "$scratch"

# Inputs (deterministic, made once).
[ -f "$scratch/stories.txt" ] ||
  "$python" "$root/bench/lm/make_inputs.py" stories "$scratch/stories.txt" --records 4000 --seed 2
head -n 1000 "$scratch/stories.txt" >"$scratch/stories-1k.txt"
[ -f "$scratch/score.ids" ] ||
  "$python" "$root/bench/lm/make_inputs.py" ids "$scratch/score.ids" --records 8 --length 256 \
    --seed 1
model=$scratch/gpt2-small
cat >"$scratch/gpt2-small-score.yaml" <<YAML
task: lm-score
model: {plugin: gpt2, path: $model}
mask: {plugin: causal}
YAML
cat >"$scratch/tiny-gpt2-score.yaml" <<YAML
task: lm-score
model: {plugin: gpt2, path: $shared/models/tiny-gpt2}
tokenizer: {plugin: bpe, path: $shared/tokenizers/gpt2}
mask: {plugin: causal}
YAML
aren=$shared/bench/aren-20k.txt
uncased="--set model.path=$shared/models/tiny-bert-uncased \
  --set tokenizer.vocab=$shared/tokenizers/bert-base-uncased/vocab.txt --set tokenizer.lowercase=true"

# name | input | masque run arguments (pipeline and settings)
all_cases=(
  "stories260k-score|$scratch/stories.txt|$root/pipelines/lm-score.yaml"
  "tiny-gpt2-score|$scratch/stories.txt|$scratch/tiny-gpt2-score.yaml"
  "tiny-bert-uncased-plm|$scratch/stories-1k.txt|$root/pipelines/plm-score.yaml $uncased"
  "tiny-bert-chinese-plm|$scratch/stories-1k.txt|$root/pipelines/plm-score.yaml"
  "aren-greedy-b1|$aren|$root/pipelines/translate.yaml --set decoder.plugin=greedy --set task.max_batch_size=1"
  "aren-greedy-b32|$aren|$root/pipelines/translate.yaml --set decoder.plugin=greedy --set task.max_batch_size=32"
  "aren-beam4-b1|$aren|$root/pipelines/translate.yaml --set decoder.beam_size=4 --set task.max_batch_size=1"
  "aren-beam4-b32|$aren|$root/pipelines/translate.yaml --set decoder.beam_size=4 --set task.max_batch_size=32"
  "gpt2-small-score|$scratch/score.ids|$scratch/gpt2-small-score.yaml --input-format ids"
)
wanted=("$@")
selected() {
  [ ${#wanted[@]} -eq 0 ] && return 0
  local w
  for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

timings=$scratch/timings
[ "${APPEND:-0}" = 1 ] || : >"$timings"
run_case() {  # name input args...: every round runs every dtype
  local name=$1 input=$2
  shift 2
  local round dtype begin end order
  local -a all=($dtypes)
  for ((round = 1; round <= rounds; round++)); do
    # Each round starts one dtype later (f32 int8 bf16, int8 bf16 f32, ...): a fixed order put
    # the same dtype after the same neighbour every round.
    order=("${all[@]:$(((round - 1) % ${#all[@]}))}" "${all[@]:0:$(((round - 1) % ${#all[@]}))}")
    for dtype in "${order[@]}"; do
      begin=$EPOCHREALTIME
      /usr/bin/time -f '%U %S' -o "$scratch/cpu" "$masque" run "$@" \
        --set model.matmul_dtype="$dtype" -i "$input" -o "$scratch/out.$dtype" --threads 1 -q \
        --summary "$scratch/summary.json"
      end=$EPOCHREALTIME
      read -r user sys <"$scratch/cpu"
      echo "$name $dtype $round $(grep -o '"seconds": [0-9.e+-]*' "$scratch/summary.json" |
        cut -d' ' -f2) $(awk -v b="$begin" -v e="$end" -v u="$user" -v s="$sys" \
        'BEGIN { printf "%.3f %.2f", e - b, u + s }')" >>"$timings"
    done
  done
}

for c in "${all_cases[@]}"; do
  IFS='|' read -r name input args <<<"$c"
  selected "$name" || continue
  if [ "$name" = gpt2-small-score ] && [ ! -f "$model/model.safetensors" ]; then
    echo "run.sh: writing the GPT-2-small model to $model ..." >&2
    "$python" "$root/bench/lm/make_model.py" "$model"
  fi
  echo "run.sh: $name ($rounds rounds: $dtypes)" >&2
  # shellcheck disable=SC2086
  run_case "$name" "$input" $args
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo
echo "CPU: $cpu, $(nproc) vCPU; masque --threads 1; rounds $rounds; $(date -u +%F)"
echo
rm -f "$scratch"/out.* "$scratch/summary.json" "$scratch/cpu"
awk -f "$here/report.awk" "$timings"
