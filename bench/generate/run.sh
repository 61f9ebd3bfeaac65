#!/bin/sh
# Generation benchmark (issue 23): masque continuous vs static batching vs PyTorch static
# batching, same prompts, same run; prints a markdown table (README.md says how to read it).
#
#   bench/generate/run.sh [BUILD_DIR]     (default: build; needs bin/masque and the plugins)
#
# Environment: PROMPTS=2000, GPT2_PROMPTS=64, TORCH_PROMPTS=500 (the PyTorch peer's share of
# each workload's prompts, 0 = all), ONLY=stories,sentence,gpt2,aren, BATCH=32, THREADS=1, ROUNDS=1 (masque runs per mode; medians), SCRATCH=bench/out/generate (inputs, outputs, results.json; not committed),
# NO_TORCH=1 to skip the PyTorch peer, OPENBLAS_DIR as in bench/lm/run.sh.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
[ -x "$build/bin/masque" ] || { echo "run.sh: $build/bin/masque not found (build first)" >&2; exit 2; }
set --
if [ -z "${NO_TORCH:-}" ]; then
  /usr/bin/python3 -c 'import torch' 2>/dev/null ||
    { echo "run.sh: /usr/bin/python3 lacks torch (apt install python3-torch)" >&2; exit 2; }
  if openblas=${OPENBLAS_DIR:-$("$root/bench/fetch-openblas.sh" --find "$build")}; then
    set -- --openblas "$openblas"
    if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
  else
    echo "run.sh: no OpenBLAS: PyTorch runs on the system BLAS" >&2
  fi
else
  set -- --no-torch
fi
exec /usr/bin/python3 "$root/bench/generate/bench.py" --build "$build" "$@" \
  --scratch "${SCRATCH:-$root/bench/out/generate}" --torch-prompts "${TORCH_PROMPTS:-500}" \
  --prompts "${PROMPTS:-2000}" --gpt2-prompts "${GPT2_PROMPTS:-64}" \
  --only "${ONLY:-stories,sentence,gpt2,aren}" --batch "${BATCH:-32}" --threads "${THREADS:-1}" \
  --rounds "${ROUNDS:-1}"
