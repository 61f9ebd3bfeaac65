#!/bin/sh
# The G2P UniLM model (pipelines/train-g2p-unilm.yaml) trained by `masque train` and by the
# plain-torch reference trainer (tests/trainer/reference_trainer.py) on the same batches, from the
# same initial weights, for the same steps, one after the other in this run; prints both wall
# times, tokens/s, validation losses and the step-by-step agreement (bench/g2p/README.md).
#
#   bench/g2p/run.sh [STEPS]        (default 1000; needs BUILD/bin/masque and its plugins)
#
# Environment:
#   BUILD=build            the build directory
#   DATA=data/g2p          scripts/g2p-data.sh's output (train.tsv, valid.tsv, tokenizer/)
#   SCRATCH=bench/out/g2p  the shuffled copy, the initial model, both runs (not committed)
#   THREADS=2              masque --threads N; torch.set_num_threads(N)
#   SEED=0                 the shuffle and the initial weights
#   OPENBLAS_DIR           OpenBLAS for PyTorch (default: bench/fetch-openblas.sh BUILD unpacks
#                          Debian's; on the system's reference BLAS PyTorch is ~30x slower)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-1000}
build=$(cd "${BUILD:-$root/build}" && pwd)
data=${DATA:-$root/data/g2p}
work=${SCRATCH:-$root/bench/out/g2p}
threads=${THREADS:-2}
seed=${SEED:-0}
masque=$build/bin/masque
python=/usr/bin/python3
script=$root/bench/g2p/reference_g2p.py

[ -x "$masque" ] || { echo "run.sh: $masque not found (scripts/setup.sh)" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "run.sh: $python has no torch (python3-torch)" >&2; exit 2; }
[ -f "$data/train.tsv" ] && [ -f "$data/valid.tsv" ] && [ -f "$data/tokenizer/tokenizer.json" ] ||
  { echo "run.sh: no G2P data in $data (scripts/g2p-data.sh)" >&2; exit 2; }
openblas=$("$root/bench/fetch-openblas.sh" --find "$build" || "$root/bench/fetch-openblas.sh" "$build")
if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

mkdir -p "$work"
rm -rf "$work/masque" "$work/torch"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" "$script" prepare --data "$data" --config "$root/examples/g2p/bert/config.json" \
  --work "$work" --seed "$seed"

# The same ids on both sides: masque's tokenizer over the shuffled file against the script's.
tokenize() {
  "$masque" tokenize --tokenizer tokenizer-json --set "path=$work/init" -q -i "$work/train.tsv" \
    --input-format tsv --columns source,target "$@"
}
tokenize --field source -o "$work/ids-source.jsonl"
tokenize --field target --no-special -o "$work/ids-target.jsonl"
"$python" "$script" check-ids --work "$work" --masque-source "$work/ids-source.jsonl" \
  --masque-target "$work/ids-target.jsonl"

# masque: the pipeline as it is, over the shuffled copy in file order, from the initial model.
echo "masque train: $steps steps, --threads $threads (log: $work/masque.log)"
start=$(now)
"$masque" train "$root/pipelines/train-g2p-unilm.yaml" --threads "$threads" \
  --set "task.train_file=$work/train.tsv" --set "task.valid_file=$data/valid.tsv" \
  --set "task.output=$work/masque" --set task.shuffle=false --set "task.steps=$steps" \
  --set task.max_minutes=0 --set task.valid_every=0 --set task.save_every=0 --set task.dropout=0 \
  --set "model.path=$work/init" --set "tokenizer.path=$work/init" >"$work/masque.log" 2>&1 ||
  { cat "$work/masque.log" >&2; exit 1; }
masque_total=$(elapsed "$start" "$(now)")
grep -q "train: \([0-9]*\) usable records of \1 " "$work/masque.log" ||
  { grep "usable records" "$work/masque.log" >&2; echo "run.sh: masque skipped records" >&2; exit 1; }

# PyTorch: reference_trainer.train() with the settings masque resolved (OUT/pipeline.yaml).
echo "reference trainer: $steps steps, torch.set_num_threads($threads)"
start=$(now)
env LD_LIBRARY_PATH="$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OMP_NUM_THREADS="$threads" \
  OPENBLAS_NUM_THREADS="$threads" "$python" "$script" train --work "$work" \
  --pipeline "$work/masque/pipeline.yaml" --threads "$threads"
torch_total=$(elapsed "$start" "$(now)")

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
exec "$python" "$script" report --work "$work" --masque-total "$masque_total" \
  --torch-total "$torch_total" --cpus "$(nproc)"
