#!/bin/sh
# Language-model benchmarks (issues 5 and 8): masque against PyTorch on the same work, in the
# same run, with 1 and 2 threads; prints markdown tables of medians and the masque/PyTorch ratios.
#
#   bench/lm/run.sh [BUILD_DIR]        (default: build-bench; needs bin/masque and the plugins)
#
# Environment:
#   ROUNDS=3     rounds; each round runs masque then PyTorch for every configuration
#   REPS=4       repetitions of the work inside one process (batches scored, prompts continued)
#   DTYPES=f32,bf16,int8   matmul types to measure (masque model.matmul_dtype, PyTorch --dtype)
#   ONLY=score,generate,corpus   which benchmarks
#   SCRATCH=bench/out/lm   where the generated model, inputs and raw results go (not committed)
#   OPENBLAS_DIR   a directory holding OpenBLAS's libblas.so.3, which PyTorch then runs on;
#                  default: where bench/fetch-openblas.sh BUILD_DIR unpacks it
#
# The GPT-2-small-sized model (random weights, ~500 MB) is written there on the first run.
# PyTorch comes from Debian's python3-torch, hence /usr/bin/python3 (not a pyenv python).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-bench}
[ -x "$build/bin/masque" ] || { echo "run.sh: $build/bin/masque not found (build first)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null ||
  { echo "run.sh: /usr/bin/python3 lacks torch or numpy (apt install python3-torch)" >&2; exit 2; }

if openblas=$("$root/bench/fetch-openblas.sh" --find "$build"); then
  set -- --openblas "$openblas"
  if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
else
  echo "run.sh: no OpenBLAS (bench/fetch-openblas.sh $build): PyTorch runs on the system BLAS" >&2
  set --
fi

exec /usr/bin/python3 "$root/bench/lm/bench.py" --build "$build" "$@" \
  --scratch "${SCRATCH:-$root/bench/out/lm}" --rounds "${ROUNDS:-3}" --reps "${REPS:-4}" \
  --dtypes "${DTYPES:-f32,bf16,int8}" --only "${ONLY:-score,generate,corpus}"
