#!/bin/sh
# Constrained decoding's overhead per step (issue 48): GPT-2-small at batch 8, free against a
# JSON schema, same prompts, same run; prints a markdown table (bench.py says how it is measured).
#
#   bench/constraint/run.sh [BUILD_DIR]      (default: build)
#
# Environment: ROUNDS=3, THREADS=1 (oneDNN threads in the one batch), PROMPTS=32, STEPS=48,
# SCRATCH=bench/out/constraint (the model, inputs, outputs, results.json; not committed).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
[ -x "$build/bin/masque" ] || { echo "run.sh: $build/bin/masque not found (build first)" >&2; exit 2; }
exec /usr/bin/python3 "$root/bench/constraint/bench.py" --build "$build" \
  --scratch "${SCRATCH:-$root/bench/out/constraint}" --rounds "${ROUNDS:-3}" \
  --threads "${THREADS:-1}" --prompts "${PROMPTS:-32}" --steps "${STEPS:-48}"
