#!/bin/sh
# Language identification, masque's classifier against CLD2 on the same test sentences, in one
# run (docs/langid.md): builds the data if missing, trains the model if missing (nice 19), then
# times masque (`classify`, 1 and 2 threads) and CLD2 (masque-bench-cld2, 1 and 2 threads) and
# prints the accuracy table (bench/langid/score.py).
#
#   bench/langid/run.sh            (needs BUILD/bin/masque, its plugins and masque-bench-cld2)
#
# Environment: BUILD=build, DATA=data/langid
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD:-$root/build}" && pwd)
data=${DATA:-$root/data/langid}
masque=$build/bin/masque
cld2=$build/bin/masque-bench-cld2
[ -x "$masque" ] || { echo "run.sh: $masque not found (scripts/setup.sh)" >&2; exit 2; }
[ -x "$cld2" ] || { echo "run.sh: $cld2 not found (libcld2-dev, then rebuild)" >&2; exit 2; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

[ -f "$data/test.tsv" ] || python3 "$root/scripts/langid_data.py" "$data"
if [ ! -e "$data/run/last" ]; then
  t0=$(now)
  nice -n 19 "$masque" train "$root/pipelines/train-langid.yaml" --threads 2
  echo "training: $(elapsed "$t0" "$(now)") s"
fi
out=$data/bench
mkdir -p "$out"
n=$(($(wc -l < "$data/test.tsv") - 1))
for threads in 1 2; do
  t0=$(now)
  "$masque" run "$root/pipelines/langid.yaml" --input-format tsv --threads "$threads" -q \
    -i "$data/test.tsv" -o "$out/masque-$threads.jsonl"
  s=$(elapsed "$t0" "$(now)")
  echo "masque: $n sentences, $threads thread(s), $s s, $(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.0f", n / s }') sentences/s (process start and model load included)"
  "$cld2" "$data/test.tsv" "$threads" > "$out/cld2-$threads.jsonl"
done
python3 "$root/bench/langid/score.py" "$data/test.tsv" "masque=$out/masque-1.jsonl" \
  "cld2=$out/cld2-1.jsonl" --markdown
