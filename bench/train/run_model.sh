#!/bin/sh
# Whole training steps, masque against PyTorch, same models and batches, in the same run; each
# case runs as its own process (so ru_maxrss is that case's peak memory), masque then PyTorch,
# ROUNDS times; then the f32 FMA peak (bench_numerics) and the table of medians (README.md).
#
#   bench/train/run_model.sh [BUILD_DIR]     (needs bench_train_model and bench_numerics built)
#
# Environment: MODELS (default "g2p bert-base gpt2-small"), THREADS (default "1 2"), DTYPES
# (default "f32 bf16"), ROUNDS (default 3), STEPS (timed steps per process; default 10 for g2p,
# 3 for the others), TORCH_BLAS (openblas, the default, or installed; see run.sh).
# Raw TSVs go to BUILD_DIR/bench/train/TAG-*.tsv (TAG defaults to "model").
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bench="$build/bin/bench_train_model"
numerics="$build/bin/bench_numerics"
python=/usr/bin/python3
script="$root/bench/train/torch_model.py"
[ -x "$bench" ] || { echo "run_model.sh: $bench not found (build bench_train_model)" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "run_model.sh: $python has no torch" >&2; exit 2; }
torch_env=""
if [ "${TORCH_BLAS:-openblas}" = openblas ]; then
  openblas=$("$root/bench/fetch-openblas.sh" --find "$build" || "$root/bench/fetch-openblas.sh" "$build")
  torch_env="LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
fi
out="$build/bench/train"
mkdir -p "$out"
rm -f "$out/${TAG:-model}-masque.tsv" "$out/${TAG:-model}-torch.tsv" "$out/${TAG:-model}-peak.tsv"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "PyTorch BLAS: ${TORCH_BLAS:-openblas}"
echo "load before: $(uptime)"
round=1
while [ "$round" -le "${ROUNDS:-3}" ]; do
  for model in ${MODELS:-g2p bert-base gpt2-small}; do
    steps=${STEPS:-}
    [ -n "$steps" ] || { [ "$model" = g2p ] && steps=10 || steps=3; }
    for threads in ${THREADS:-1 2}; do
      for dtype in ${DTYPES:-f32 bf16}; do
        OMP_NUM_THREADS=$threads "$bench" --model "$model" --threads "$threads" --dtype "$dtype" \
          --steps "$steps" --warmup 1 >>"$out/${TAG:-model}-masque.tsv" ||
          echo "run_model.sh: masque $model $dtype $threads failed" >&2
        env $torch_env OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$python" "$script" \
          --model "$model" --threads "$threads" --dtype "$dtype" --steps "$steps" --warmup 1 \
          >>"$out/${TAG:-model}-torch.tsv" ||
          echo "run_model.sh: PyTorch $model $dtype $threads failed" >&2
      done
    done
  done
  for threads in ${THREADS:-1 2}; do
    [ -x "$numerics" ] && OMP_NUM_THREADS=$threads "$numerics" --threads "$threads" --filter peak >>"$out/${TAG:-model}-peak.tsv" || true
  done
  round=$((round + 1))
done
echo "load after: $(uptime)"
exec "$python" "$script" --compare "$out/${TAG:-model}-masque.tsv" "$out/${TAG:-model}-torch.tsv" --peak "$out/${TAG:-model}-peak.tsv"
