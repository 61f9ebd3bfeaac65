#!/usr/bin/env bash
# rnn-seq2seq vs PyTorch nn.LSTM / nn.GRU (issue 26): the same model and sources in the same run,
# encoding and greedy decoding at batch 1 and 32, THREADS threads each (see README.md).
#
#   bench/rnn/run.sh [BUILD_DIR]     (default: build next to this repository's CMakeLists.txt)
#   environment: STEPS=20 (greedy steps per source), REPEATS=3 (min of), ROUNDS=1 (rounds of
#                both sides, alternating; medians), DTYPES="f32 bf16 int8"
#                (masque's matmul_dtype values to run), THREADS=1 (each side's threads; a list,
#                e.g. "1 2", runs each, then compares each side at its best thread count per
#                cell), OPENBLAS_DIR (as
#                bench/fetch-openblas.sh --find: PyTorch's BLAS; else the system's libblas.so.3)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
python=${MASQUE_TORCH_PYTHON:-/usr/bin/python3}  # Debian's, with python3-torch
env=(env)
blas="system libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo none)"
if openblas=$("$root/bench/fetch-openblas.sh" --find "$build"); then
  env+=("LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  blas="OpenBLAS from $openblas"
  if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
fi
cmake --build "$build" --target bench_rnn >/dev/null
work=$build/bench/rnn-work
mkdir -p "$work"
echo "PyTorch BLAS: $blas${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)}"
# One process per thread count (OpenBLAS takes its thread count at load time).
results=()
for threads in ${THREADS:-1}; do
  rm -f "$work/results-$threads.json"
  "${env[@]}" OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads THREADS=$threads \
    "$python" "$here/bench.py" "$build/bin/bench_rnn" "$work"
  results+=("$work/results-$threads.json")
  echo
done
if [ ${#results[@]} -gt 1 ]; then env -u THREADS "$python" "$here/bench.py" --best "${results[@]}"; fi
