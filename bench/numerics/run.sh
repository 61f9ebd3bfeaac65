#!/bin/sh
# Runs the numerics benchmark of masque and of PyTorch on the same shapes, with 1 and 2
# threads, and prints the comparison tables (medians over rounds; see README.md).
#
#   bench/numerics/run.sh [BUILD_DIR]      (default: build; needs bench_numerics built)
#
# Environment: ROUNDS (default 3), REPEATS (timed batches per case and run, default 7),
# THREADS (default "1 2"), OPENBLAS_DIR (a directory holding OpenBLAS's libblas.so.3: PyTorch
# then also runs on it; default BUILD_DIR/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread when
# that exists). Results go to BUILD_DIR/bench/numerics/*.tsv. Exits 1 when a target is missed.
#
# PyTorch comes from Debian's python3-torch, hence /usr/bin/python3 (not a pyenv python).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bench="$build/bin/bench_numerics"
python=/usr/bin/python3
script="$root/bench/numerics/torch_bench.py"
rounds=${ROUNDS:-3}
repeats=${REPEATS:-7}
threads_list=${THREADS:-1 2}
openblas=$("$root/bench/fetch-openblas.sh" --find "$build" || true)
if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
[ -x "$bench" ] || { echo "run.sh: $bench not found (build the bench_numerics target)" >&2; exit 2; }
"$python" -c 'import torch' 2>/dev/null || { echo "run.sh: $python has no torch (python3-torch)" >&2; exit 2; }

# PyTorch as installed, and on OpenBLAS when it is at hand and not already the system BLAS.
system_blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)
with_openblas=no
case "$system_blas" in
  *openblas*) ;;
  *) [ -n "$openblas" ] && with_openblas=yes ;;
esac

out="$build/bench/numerics"
mkdir -p "$out"
rm -f "$out/masque.tsv" "$out/torch-installed.tsv" "$out/torch-openblas.tsv"

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" status --porcelain --untracked-files=no | grep -q . && echo ' (+ uncommitted changes in the tree)')"
echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "system libblas.so.3: $system_blas; OpenBLAS run: $with_openblas"
echo "load before: $(uptime)"
round=1
while [ "$round" -le "$rounds" ]; do
  for threads in $threads_list; do
    # Each side runs with exactly this many threads, one after the other in this round.
    OMP_NUM_THREADS=$threads "$bench" --threads "$threads" --repeats "$repeats" >>"$out/masque.tsv"
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
      "$python" "$script" --threads "$threads" --repeats "$repeats" >>"$out/torch-installed.tsv"
    if [ "$with_openblas" = yes ]; then
      OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads \
        LD_LIBRARY_PATH="$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$python" "$script" --threads "$threads" --repeats "$repeats" >>"$out/torch-openblas.tsv"
    fi
  done
  echo "load after round $round: $(uptime)"
  round=$((round + 1))
done
echo

set -- "$out/masque.tsv"
[ "$with_openblas" = yes ] && set -- "$@" "openblas=$out/torch-openblas.tsv"
set -- "$@" "installed=$out/torch-installed.tsv"
exec "$python" "$script" --compare "$@"
