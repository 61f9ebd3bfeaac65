#!/bin/sh
# Language identification, masque's classifier against CLD2 on the same sentences, in one run
# (docs/langid.md): builds the data if missing, trains the model if missing (nice 19), then
# times masque (`classify`, 1 and 2 threads) and CLD2 (masque-bench-cld2, 1 and 2 threads) on
# the test set and prints the accuracy tables (bench/langid/score.py): the validation set first
# (catalogs held out of training: what settings were chosen on), then the test set.
#
#   bench/langid/run.sh            (needs BUILD/bin/masque, its plugins and masque-bench-cld2)
#   /work/notes/timed.sh bench/langid/run.sh     (on a shared machine: alone while timed)
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

# masque on SET with THREADS: wall time (process start and model load included) and CPU time.
run_masque() {
  set_name=$1 threads=$2
  n=$(($(wc -l < "$data/$set_name.tsv") - 1))
  t0=$(now)
  cpu=$( { /usr/bin/time -f "%U %S" "$masque" run "$root/pipelines/langid.yaml" \
    --input-format tsv --threads "$threads" -q -i "$data/$set_name.tsv" \
    -o "$out/masque-$set_name-$threads.jsonl" 2>&1 >/dev/null; } | tail -1)
  s=$(elapsed "$t0" "$(now)")
  echo "masque: $set_name, $n sentences, $threads thread(s), $s s wall" \
    "($(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.0f", n / s }') sentences/s, process start" \
    "and model load included), CPU user+sys $(echo "$cpu" | awk '{ printf "%.2f", $1 + $2 }') s"
}

run_masque valid 2
"$cld2" "$data/valid.tsv" 1 > "$out/cld2-valid-1.jsonl"
for threads in 1 2; do
  run_masque test "$threads"
  "$cld2" "$data/test.tsv" "$threads" > "$out/cld2-test-$threads.jsonl"
done
for threads in 1 2; do
  cmp -s "$out/masque-test-1.jsonl" "$out/masque-test-$threads.jsonl" ||
    echo "run.sh: masque's answers differ between 1 and $threads threads" >&2
done
echo "validation (catalogs held out of training):"
python3 "$root/bench/langid/score.py" "$data/valid.tsv" "masque=$out/masque-valid-2.jsonl" \
  "cld2=$out/cld2-valid-1.jsonl" --markdown
echo "test:"
python3 "$root/bench/langid/score.py" "$data/test.tsv" "masque=$out/masque-test-1.jsonl" \
  "cld2=$out/cld2-test-1.jsonl" --markdown
