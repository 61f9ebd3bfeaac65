#!/usr/bin/env bash
# Encoder-decoder throughput (issue 7): masque's `translate` pipeline vs the PyTorch reference
# (bench/encdec/reference_torch.py) on ../shared/bench/aren-20k.txt, in the same run, greedy and
# beam 4 at batch sizes 1 and 32. Prints lines/s (whole-process wall time, model load included,
# medians of RUNS rounds), the ratios, CTranslate2 4.8.1's published figures for the same input
# (CTranslate2 itself is not installed here: those numbers come from ../shared/bench/README.md),
# and whether the outputs are identical: masque vs PyTorch, and masque across thread counts,
# batch sizes and rounds.
#
#   bench/encdec/run.sh [BUILD_DIR]     (default: build next to this repository's CMakeLists.txt)
#   environment: RUNS=3 (rounds; medians are reported), THREADS="1 2" (masque --threads values),
#                TORCH_LINES=0 (PyTorch translates only the first N lines; 0 = all),
#                KEEP=0 (1 = keep the outputs and raw timings in $BUILD_DIR/bench/encdec),
#                OPENBLAS_DIR (OpenBLAS's libblas.so.3 for PyTorch; default where
#                bench/fetch-openblas.sh BUILD_DIR unpacks it, else the system's BLAS),
#                CT2_TRANSLATOR, CT2_MODEL (optional CTranslate2 peer, below)
#
# CTranslate2 peer: when CT2_TRANSLATOR (a `ct2-translator` binary, CTranslate2's C++ client)
# and CT2_MODEL (aren-transliteration converted to a CTranslate2 model folder) are both set,
# every round also runs it on the same lines, float32 and int8, at each --threads value (as
# inter_threads, one intra-op thread each, like masque's workers), and masque with
# model.matmul_dtype=int8, and the report adds measured masque/CTranslate2 ratios. Nothing of
# CTranslate2 is part of the project; unset, the peer is skipped. (Written from CTranslate2's
# cli/translator.cc options; not run against a real CTranslate2 here, which is not installed.)
#
# Each round runs, per configuration, masque at every thread count and then PyTorch, so that
# both see the same machine load. `--threads N` runs N batches in parallel with one oneDNN
# thread each; PyTorch runs with one intra-op thread (its own --threads 1).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd || echo "${1:-$root/build}")
runs=${RUNS:-3}
threads=${THREADS:-1 2}
torch_lines=${TORCH_LINES:-0}
input=$root/../shared/bench/aren-20k.txt
python=/usr/bin/python3  # Debian's, with python3-torch (a pyenv python3 on PATH may lack it)
# Debian's PyTorch runs float matmuls on whatever libblas.so.3 the loader finds: OpenBLAS when
# it is at hand, else the system's (the reference BLAS unless OpenBLAS is installed).
torch_env=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
torch_blas="system libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo none)"
if openblas=$("$root/bench/fetch-openblas.sh" --find "$build"); then
  torch_env+=("LD_LIBRARY_PATH=$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  torch_blas="OpenBLAS from $openblas"
  if coretype=$("$root/bench/fetch-openblas.sh" --coretype "$openblas"); then export OPENBLAS_CORETYPE=$coretype; fi
fi

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$build" masque masque_model_encoder_decoder masque_tokenizer_vocab \
  masque_decoder_greedy masque_decoder_beam >/dev/null
masque=$build/bin/masque
"$python" -c 'import torch' 2>/dev/null ||
  { echo "run.sh: $python cannot import torch (apt-get install python3-torch)" >&2; exit 2; }

ct2=""
if [ -n "${CT2_TRANSLATOR:-}" ] || [ -n "${CT2_MODEL:-}" ]; then
  [ -x "${CT2_TRANSLATOR:-}" ] ||
    { echo "run.sh: CT2_TRANSLATOR='${CT2_TRANSLATOR:-}' is not an executable" >&2; exit 2; }
  [ -f "${CT2_MODEL:-}/model.bin" ] ||
    { echo "run.sh: CT2_MODEL='${CT2_MODEL:-}' holds no model.bin (a CTranslate2 model folder)" >&2
      exit 2; }
  ct2=$CT2_TRANSLATOR
fi

work=$build/bench/encdec
rm -rf "$work"
mkdir -p "$work"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
lines=$(wc -l <"$input")
torch_input=$input
if [ "$torch_lines" -gt 0 ] && [ "$torch_lines" -lt "$lines" ]; then
  torch_input=$work/input-head.txt
  head -n "$torch_lines" "$input" >"$torch_input"
fi
torch_count=$(wc -l <"$torch_input")

# name | masque settings | reference settings | CTranslate2 4.8.1 lines/s (published) |
# ct2-translator settings (translate.yaml's beam search: length penalty 1, 1..256 new tokens)
configs=(
  "greedy-b1|--set decoder.plugin=greedy --set task.max_batch_size=1|--beam-size 1 --batch-size 1|1480|--beam_size 1 --batch_size 1"
  "greedy-b32|--set decoder.plugin=greedy --set task.max_batch_size=32|--beam-size 1 --batch-size 32|2900|--beam_size 1 --batch_size 32"
  "beam4-b1|--set decoder.beam_size=4 --set task.max_batch_size=1|--beam-size 4 --batch-size 1|720|--beam_size 4 --batch_size 1"
  "beam4-b32|--set decoder.beam_size=4 --set task.max_batch_size=32|--beam-size 4 --batch-size 32|1030|--beam_size 4 --batch_size 32"
)
ct2_common=(--length_penalty 1 --max_decoding_length 256 --min_decoding_length 1
  --batch_type examples --intra_threads 1 --device cpu)

# Runs a command, appends "TIME <label> <lines> <wall s> <cpu s>" to the timings file.
timed() {
  local label=$1 count=$2
  shift 2
  local begin=$EPOCHREALTIME
  /usr/bin/time -f '%U %S' -o "$work/cpu" "$@" 2>>"$work/stderr.log"
  local end=$EPOCHREALTIME
  read -r user sys <"$work/cpu"
  echo "TIME $label $count $(awk -v b="$begin" -v e="$end" -v u="$user" -v s="$sys" \
    'BEGIN { printf "%.4f %.2f", e - b, u + s }')" >>"$work/timings"
}

for config in "${configs[@]}"; do
  IFS='|' read -r name _ _ peer _ <<<"$config"
  echo "PEER $name $peer" >>"$work/timings"
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= runs; r++)); do
  for config in "${configs[@]}"; do
    IFS='|' read -r name masque_args torch_args _ ct2_args <<<"$config"
    for t in $threads; do
      # shellcheck disable=SC2086  # the settings are meant to split into words
      timed "$name masque-t$t" "$lines" "$masque" run "$root/pipelines/translate.yaml" \
        -i "$input" -o "$work/$name-masque-t$t-r$r.txt" --format text -q --threads "$t" \
        $masque_args
      [ -n "$ct2" ] || continue
      # shellcheck disable=SC2086
      timed "$name masque-int8-t$t" "$lines" "$masque" run "$root/pipelines/translate.yaml" \
        -i "$input" -o "$work/$name-masque-int8-t$t-r$r.txt" --format text -q --threads "$t" \
        --set model.matmul_dtype=int8 $masque_args
      for ct in float32 int8; do
        # shellcheck disable=SC2086
        timed "$name ct2-$ct-t$t" "$lines" "$ct2" --model "$CT2_MODEL" --src "$input" \
          --out "$work/$name-ct2-$ct-t$t-r$r.txt" --compute_type "$ct" --inter_threads "$t" \
          "${ct2_common[@]}" $ct2_args
      done
    done
    # shellcheck disable=SC2086
    timed "$name pytorch-t1" "$torch_count" "${torch_env[@]}" "$python" "$here/reference_torch.py" --threads 1 \
      $torch_args "$torch_input" "$work/$name-pytorch-t1-r$r.txt"
    printf 'round %d/%d: %s done\r\033[K' "$r" "$runs" "$name" >&2
  done
done
printf '\n' >&2
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Output checks: one line per configuration and decoder.
same() { cmp -s "$1" "$2" && echo yes || echo NO; }
first_t=${threads%% *}
for config in "${configs[@]}"; do
  IFS='|' read -r name _ <<<"$config"
  head -n "$torch_count" "$work/$name-masque-t$first_t-r1.txt" >"$work/masque-head.txt"
  echo "CHECK $name vs-pytorch $(same "$work/masque-head.txt" "$work/$name-pytorch-t1-r1.txt")"
  [ -z "$ct2" ] ||
    echo "CHECK $name vs-ct2 $(same "$work/$name-masque-t$first_t-r1.txt" \
      "$work/$name-ct2-float32-t$first_t-r1.txt")"
done >>"$work/timings"
for decoder in greedy beam4; do
  reference=$work/$decoder-b1-masque-t$first_t-r1.txt
  verdict=yes
  for f in "$work/$decoder"-b*-masque-t*-r*.txt; do
    [ "$(same "$reference" "$f")" = yes ] || verdict=NO
  done
  echo "CHECK $decoder masque-all $verdict" >>"$work/timings"
done

# The vector extensions that matter for oneDNN, as /proc/cpuinfo lists them.
cpu_flags() {
  grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -x -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_tile' | paste -sd' '
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
  "$(nproc) vCPU ($(cpu_flags)); load average before $load_before, after $load_after"
echo "input: $input ($lines lines; PyTorch: $torch_count)"
echo "masque: $masque (threads: $threads); PyTorch $("$python" -c 'import torch; print(torch.__version__)') (1 thread; BLAS: $torch_blas${OPENBLAS_CORETYPE:+, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE})"
echo
[ -z "$ct2" ] || echo "CTranslate2 peer: $ct2 --model $CT2_MODEL (measured in this run)"
awk -v runs="$runs" -v threads="$threads" -f "$here/report.awk" "$work/timings"
