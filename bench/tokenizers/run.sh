#!/usr/bin/env bash
# Tokenizer throughput: masque's bpe plugin vs tiktoken (npm, `gpt2` encoding) on the same
# corpus in the same run, plus masque's wordpiece (bert-base-uncased). One thread each.
#
#   bench/tokenizers/run.sh [BUILD_DIR]        (default: build-tok next to this repository's
#                                               CMakeLists.txt)
#   environment: MB=8 (corpus size), ROUNDS=7 (alternating rounds; medians are reported)
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
rounds=${ROUNDS:-7}

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$build" masque-bench-tokenizers >/dev/null
bench="$build/bin/masque-bench-tokenizers"

if [ ! -f "$here/node_modules/tiktoken/package.json" ] ||
   ! grep -q '"version": "1.0.22"' "$here/node_modules/tiktoken/package.json"; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

corpus="$build/bench/tokenizers/corpus-${mb}mb.txt"
mkdir -p "$(dirname "$corpus")"
[ -f "$corpus" ] || "$bench" corpus "$corpus" --mb "$mb" 2>/dev/null

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; r++)); do
  "$bench" run "$corpus" --reps 1 >>"$results"
  node "$here/bench.mjs" "$corpus" --reps 1 >>"$results"
  printf 'round %d/%d done\r' "$r" "$rounds" >&2
done
printf '\n' >&2

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) vCPU;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "corpus: $corpus ($(wc -c <"$corpus") bytes, $(wc -l <"$corpus") lines, encoded line by line)"
echo "peer: node $(node --version), tiktoken $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$here/node_modules/tiktoken/package.json")"
echo
awk -v rounds="$rounds" '
  $1 == "RESULT" {
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
    split("masque-bpe-gpt2 tiktoken-gpt2 masque-wordpiece-bert-base-uncased", names, " ")
    for (k = 1; k <= 3; k++) {
      name = names[k]
      if (!(name in n)) continue
      w[name] = median(wall, name); c[name] = median(cpu, name)
      printf "%-36s %12.2f %12.2f %12.2f %10d  %s%s\n", name, w[name], c[name], median(first, name), tokens[name], sum[name], (name in bad) ? " (differs between rounds!)" : ""
    }
    printf "\nmedians of %d rounds; 1st pass = a fresh tokenizer (empty caches)\n", rounds
    if (("masque-bpe-gpt2" in n) && ("tiktoken-gpt2" in n)) {
      printf "bpe / tiktoken: %.2fx (wall clock), %.2fx (CPU time)\n", w["masque-bpe-gpt2"] / w["tiktoken-gpt2"], c["masque-bpe-gpt2"] / c["tiktoken-gpt2"]
      printf "same ids as tiktoken on the whole corpus: %s\n", (sum["masque-bpe-gpt2"] == sum["tiktoken-gpt2"] && tokens["masque-bpe-gpt2"] == tokens["tiktoken-gpt2"]) ? "yes" : "NO"
    }
  }' "$results"
