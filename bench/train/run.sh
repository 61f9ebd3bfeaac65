#!/bin/sh
# Times masque's training ops and PyTorch's on the same BERT-base shapes in the same run and
# prints medians and ratios (see README.md). About a minute.
#
#   bench/train/run.sh [BUILD_DIR]      (default: build; needs bench_train_ops built)
#
# Environment: ROUNDS (default 3), REPEATS (timed calls per case and round, default 5),
# THREADS (default "2"), TORCH_BLAS (openblas, the default: PyTorch runs on Debian's OpenBLAS,
# unpacked into BUILD_DIR by bench/fetch-openblas.sh; installed: on the system's libblas.so.3,
# which without OpenBLAS is the reference BLAS, ~30x slower on these matmuls).
# Results go to BUILD_DIR/bench/train/*.tsv.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bench="$build/bin/bench_train_ops"
python=/usr/bin/python3
script="$root/bench/train/torch_ops.py"
rounds=${ROUNDS:-3}
repeats=${REPEATS:-5}
threads_list=${THREADS:-2}
[ -x "$bench" ] || { echo "run.sh: $bench not found (build the bench_train_ops target)" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "run.sh: $python has no torch (python3-torch)" >&2; exit 2; }
torch_env=""
if [ "${TORCH_BLAS:-openblas}" = openblas ]; then
  openblas=$("$root/bench/fetch-openblas.sh" --find "$build" || "$root/bench/fetch-openblas.sh" "$build")
  torch_env="LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
fi
out="$build/bench/train"
mkdir -p "$out"
rm -f "$out/masque.tsv" "$out/torch.tsv"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "PyTorch BLAS: ${TORCH_BLAS:-openblas}"
echo "load before: $(uptime)"
round=1
while [ "$round" -le "$rounds" ]; do
  for threads in $threads_list; do
    OMP_NUM_THREADS=$threads "$bench" --threads "$threads" --repeats "$repeats" >>"$out/masque.tsv"
    env $torch_env OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$python" "$script" --threads "$threads" --repeats "$repeats" >>"$out/torch.tsv"
  done
  round=$((round + 1))
done
echo "load after: $(uptime)"
exec "$python" "$script" --compare "$out/masque.tsv" "$out/torch.tsv"
