#!/usr/bin/env bash
# Tokenizer throughput, one thread each, same corpus, same run:
#   masque's bpe vs tiktoken (npm, `gpt2` encoding), plus masque's wordpiece (bert-base-uncased);
#   masque's tokenizer-json on the six files of ../shared/tokenizers-json vs Hugging Face
#   tokenizers 0.22 (Rust, through npm @anush008/tokenizers) and, for llama3 and qwen3,
#   transformers.js (npm @huggingface/transformers); and the load time and memory of each file.
#
#   bench/tokenizers/run.sh [BUILD_DIR]        (default: build-tok next to this repository's
#                                               CMakeLists.txt)
#   environment: MB=8 (corpus size), JSON_MB=2 (corpus size for the tokenizer.json rows: the
#   JavaScript peer is slow), ROUNDS=7 (alternating rounds; medians are reported),
#   JSON_MODELS="llama3 qwen3 deepseek-v3 gemma3 phi-3-mini t5-small"
#
# Steps: build masque-bench-tokenizers and the plugins (Release), install tiktoken into
# bench/tokenizers/node_modules from package-lock.json, write a deterministic corpus into the
# build directory (never committed), then alternate one masque process and one node process per
# round so that both see the same machine load, and print medians.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-tok}
mb=${MB:-8}
json_mb=${JSON_MB:-2}
rounds=${ROUNDS:-7}
json_models=${JSON_MODELS:-llama3 qwen3 deepseek-v3 gemma3 phi-3-mini t5-small}

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$build" masque-bench-tokenizers >/dev/null
bench="$build/bin/masque-bench-tokenizers"

# --ignore-scripts: transformers.js pulls onnxruntime-node, whose install script downloads
# binaries; only its tokenizers are used here.
if [ ! -f "$here/node_modules/tiktoken/package.json" ] ||
   ! grep -q '"version": "1.0.22"' "$here/node_modules/tiktoken/package.json" ||
   [ ! -f "$here/node_modules/@anush008/tokenizers/package.json" ] ||
   [ ! -f "$here/node_modules/@huggingface/transformers/package.json" ]; then
  (cd "$here" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
# The Rust peer on one thread: no rayon pool, one libuv worker.
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1

corpus="$build/bench/tokenizers/corpus-${mb}mb.txt"
mkdir -p "$(dirname "$corpus")"
[ -f "$corpus" ] || "$bench" corpus "$corpus" --mb "$mb" 2>/dev/null
json_corpus="$build/bench/tokenizers/corpus-${json_mb}mb.txt"
[ -f "$json_corpus" ] || "$bench" corpus "$json_corpus" --mb "$json_mb" 2>/dev/null
masque_json=""
for m in $json_models; do masque_json="$masque_json,masque-json-$m"; done
models_csv=$(tr ' ' ',' <<<"$json_models")
tfjs_csv=$(tr ' ' '\n' <<<"$json_models" | grep -xE 'llama3|qwen3' | paste -sd, || true)

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; r++)); do
  "$bench" run "$corpus" --reps 1 --only masque-bpe-gpt2,masque-wordpiece-bert-base-uncased >>"$results"
  node "$here/bench.mjs" "$corpus" --reps 1 >>"$results"
  "$bench" run "$json_corpus" --reps 1 --only "${masque_json#,}" >>"$results"
  node "$here/bench_hf.mjs" "$json_corpus" --reps 1 --models "$models_csv" --peers rust,rust-batch >>"$results"
  [ -z "$tfjs_csv" ] || node "$here/bench_hf.mjs" "$json_corpus" --reps 1 --models "$tfjs_csv" --peers tfjs >>"$results"
  printf 'round %d/%d done\r' "$r" "$rounds" >&2
done
printf '\n' >&2
loads=$(for m in $json_models; do "$bench" load "$(cd "$root/.." && pwd)/shared/tokenizers-json/$m"; done)

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) vCPU;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "corpus: $corpus ($(wc -c <"$corpus") bytes, $(wc -l <"$corpus") lines, encoded line by line)"
echo "tokenizer.json corpus: $json_corpus ($(wc -c <"$json_corpus") bytes, $(wc -l <"$json_corpus") lines)"
version() { sed -n 's/^  "version": "\(.*\)".*/\1/p' "$here/node_modules/$1/package.json"; }
echo "peers: node $(node --version), tiktoken $(version tiktoken), @anush008/tokenizers $(version @anush008/tokenizers)" \
  "(Hugging Face tokenizers, Rust), @huggingface/transformers $(version @huggingface/transformers)"
echo
awk -v rounds="$rounds" '
  $1 == "RESULT" {
    if (!($2 in n)) order[++count] = $2
    n[$2]++; wall[$2, n[$2]] = $3; cpu[$2, n[$2]] = $4; first[$2, n[$2]] = $5
    tokens[$2] = $6
    if (!($2 in sum)) sum[$2] = $7; else if (sum[$2] != $7) bad[$2] = 1
  }
  function median(a, name, k,   v, i, j, t, c) {
    c = n[name]
    for (i = 1; i <= c; i++) v[i] = a[name, i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((c + 1) / 2)]
  }
  END {
    printf "%-36s %12s %12s %12s %10s  %s\n", "tokenizer (one thread)", "MB/s wall", "MB/s CPU", "1st pass", "tokens", "ids checksum"
    for (k = 1; k <= count; k++) {
      name = order[k]
      w[name] = median(wall, name); c[name] = median(cpu, name)
      printf "%-36s %12.2f %12.2f %12.2f %10d  %s%s\n", name, w[name], c[name], median(first, name), tokens[name], sum[name], (name in bad) ? " (differs between rounds!)" : ""
    }
    printf "\nmedians of %d rounds; 1st pass = a fresh tokenizer (empty caches)\n", rounds
    if (("masque-bpe-gpt2" in n) && ("tiktoken-gpt2" in n)) {
      printf "bpe / tiktoken: %.2fx (wall clock), %.2fx (CPU time)\n", w["masque-bpe-gpt2"] / w["tiktoken-gpt2"], c["masque-bpe-gpt2"] / c["tiktoken-gpt2"]
      printf "same ids as tiktoken on the whole corpus: %s\n", (sum["masque-bpe-gpt2"] == sum["tiktoken-gpt2"] && tokens["masque-bpe-gpt2"] == tokens["tiktoken-gpt2"]) ? "yes" : "NO"
    }
    for (k = 1; k <= count; k++) {
      name = order[k]
      if (name !~ /^masque-json-/) continue
      model = substr(name, 13)
      line = sprintf("tokenizer-json %s:", model)
      split("rust-json- rust-batch-json- tfjs-json-", peers, " ")
      for (p = 1; p <= 3; p++) {
        peer = peers[p] model
        if (!(peer in n)) continue
        line = line sprintf(" %.2fx %s (wall), %.2fx (CPU), same ids: %s;", w[name] / w[peer], peer, c[name] / c[peer], (sum[name] == sum[peer] && tokens[name] == tokens[peer]) ? "yes" : "NO")
      }
      print line
    }
  }' "$results"
echo
echo "loading (seconds, resident memory added in MiB, ids):"
sed 's/^LOAD /  /' <<<"$loads"
