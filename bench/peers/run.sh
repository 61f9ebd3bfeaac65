#!/usr/bin/env bash
# masque against llama.cpp on the same weights (issue 44): Qwen2.5-0.5B, Llama-3.2-3B and
# Llama-3.1-8B shapes (their real config.json, random seeded bf16 weights), masque's matmul types
# f32/bf16/int8/int4 against llama.cpp's F32/BF16/Q8_0/Q4_0 GGUF files of the same weights:
# prefill of 512 tokens and 128 greedy decoding steps at batch 1, 1 and 2 threads, peak RSS,
# the logits of the first positions, and the machine's read bandwidth measured in the same run.
#
#   bench/peers/run.sh [BUILD_DIR]                (default: build)
#   environment: MODELS=qwen2.5-0.5b,llama-3.2-3b,llama-3.1-8b  DTYPES=f32,bf16,int8,int4
#                THREADS=1,2  ROUNDS=3  ONLY=logits,speed
#                PEERS_MODELS=/work/peers-models (model folders and GGUF files: 50+ GB, outside
#                the repository)  MEMORY_LIMIT_GB=20 (a cell whose process would pass it is not
#                run, or killed)  DISK_RESERVE_GB=20 (free disk kept when writing files)
#                ROPE_SCALING=auto|keep|drop (auto: drop the Llama 3 rope_scaling when masque
#                refuses it)  QUIET_WAIT=900 (seconds to wait at most, before each process,
#                for the CPUs to be idle; each row records the share other processes used)
#                RESULTS=results.json (the raw results file in bench/out/peers), APPEND=0
#                (1: add to the measurements already in that file)
#
# The llama.cpp peer is the npm package node-llama-cpp, pinned in package-lock.json, with its
# prebuilt CPU binary (@node-llama-cpp/linux-x64; nothing is compiled), installed into
# bench/peers/node_modules (git-ignored). Raw results: bench/out/peers/results.json;
# `bench.py --report --build B --scratch bench/out/peers` prints the tables again.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ -x "$build/bin/masque" ] || { echo "run.sh: $build/bin/masque not found (build first)" >&2; exit 2; }

# --omit=optional: only the CPU binary (the package lists CUDA and Vulkan builds as optional
# dependencies; @node-llama-cpp/linux-x64 is a direct one). --ignore-scripts: its postinstall
# would offer to download and compile llama.cpp when no prebuilt binary fits.
if [ ! -f "$here/node_modules/@node-llama-cpp/linux-x64/package.json" ] ||
   ! grep -q '"version": "3.21.1"' "$here/node_modules/node-llama-cpp/package.json"; then
  (cd "$here" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

exec /usr/bin/python3 "$here/bench.py" --build "$build" --scratch "$root/bench/out/peers" \
  --models "${MODELS:-qwen2.5-0.5b,llama-3.2-3b,llama-3.1-8b}" \
  --dtypes "${DTYPES:-f32,bf16,int8,int4}" --threads "${THREADS:-1,2}" \
  --rounds "${ROUNDS:-3}" --only "${ONLY:-logits,speed}" \
  --models-dir "${PEERS_MODELS:-/work/peers-models}" \
  --memory-limit-gb "${MEMORY_LIMIT_GB:-20}" --disk-reserve-gb "${DISK_RESERVE_GB:-20}" \
  --rope-scaling "${ROPE_SCALING:-auto}" --quiet-wait "${QUIET_WAIT:-900}" \
  --results "${RESULTS:-results.json}" $([ "${APPEND:-0}" = 1 ] && echo --append)
