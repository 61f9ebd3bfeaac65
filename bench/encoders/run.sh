#!/usr/bin/env bash
# masque's embed task against ONNX Runtime on the same weights (issue 49, the encoder half):
# BertModel folders in the MiniLM-L6 and BERT-base shapes (random seeded weights), CLS vectors
# of paragraphs from /usr/share/doc as token ids, batch sizes 1/8/32/128, 1 and 2 threads,
# masque's f32/int8 against ORT's f32/dynamic-int8 graphs of the same weights (bf16: masque
# alone), seq/s and peak RSS of each side, and the vectors of every run compared.
#
#   bench/encoders/run.sh [BUILD_DIR]          (default: build)
#   environment: MODELS=minilm-l6,bert-base  DTYPES=f32,int8,bf16  THREADS=1,2
#                BATCHES=1,8,32,128  ROUNDS=3  SEQUENCES=256 (records, the first of a seeded
#                shuffle of the paragraphs)  MAX_LENGTH=128 (tokens a record keeps, [SEP] last)
#                MASQUE_THREADING=workers|intra (workers: masque --threads N, N batches at
#                once; intra: --threads 1 --intra-threads N, like ORT's intra-op threads)
#                INT8_PER_CHANNEL=0 (1: ORT's int8 weights get a scale per output column)
#                QUIET_WAIT=900 (seconds to wait at most, before each process, for idle CPUs;
#                each row records the share other processes used)  MEMORY_LIMIT_GB=8
#                RESULTS=results.json (the raw results file in bench/out/encoders)
#
# The peer is the npm package onnxruntime-node, pinned in package-lock.json (its CPU library is
# inside the package), installed into bench/encoders/node_modules (git-ignored). Model folders,
# ONNX files, records and raw results: bench/out/encoders/ (git-ignored);
# `bench.py --report --build B --scratch bench/out/encoders` prints the tables again.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ -x "$build/bin/masque" ] ||
  { echo "run.sh: $build/bin/masque not found (build first)" >&2; exit 2; }
/usr/bin/python3 -c "import torch, numpy, onnx" 2>/dev/null || {
  echo "run.sh: needs Debian's python3-torch, python3-numpy, python3-onnx (scripts/setup.sh)" >&2
  exit 2
}

# --ignore-scripts: onnxruntime-node's postinstall downloads GPU builds; its CPU library for
# linux-x64 ships in the package itself.
if ! grep -qs '"version": "1.30.0"' "$here/node_modules/onnxruntime-node/package.json"; then
  (cd "$here" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

extra=()
[ "${INT8_PER_CHANNEL:-0}" = 1 ] && extra+=(--int8-per-channel)
exec /usr/bin/python3 "$here/bench.py" --build "$build" --scratch "$root/bench/out/encoders" \
  --models "${MODELS:-minilm-l6,bert-base}" --dtypes "${DTYPES:-f32,int8,bf16}" \
  --threads "${THREADS:-1,2}" --batches "${BATCHES:-1,8,32,128}" --rounds "${ROUNDS:-3}" \
  --sequences "${SEQUENCES:-256}" --max-length "${MAX_LENGTH:-128}" \
  --masque-threading "${MASQUE_THREADING:-workers}" \
  "${extra[@]}" \
  --memory-limit-gb "${MEMORY_LIMIT_GB:-8}" --quiet-wait "${QUIET_WAIT:-900}" \
  --results "${RESULTS:-results.json}"
