#!/bin/sh
# The language-ID model's error at each matmul type (docs/precision.md): classifies the test
# set with matmul_dtype f32, bf16 (where the CPU has it), int8 and int4, all labels' scores and
# the logits kept, then compares each type with f32 (bench/langid/compare_types.py): accuracy,
# answers changed, logit differences and the KL divergence of the label distribution.
#
#   bench/langid/types.sh          (needs a trained model: bench/langid/run.sh trains one)
#
# Environment: BUILD=build, DATA=data/langid, THREADS=2
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD:-$root/build}" && pwd)
data=${DATA:-$root/data/langid}
masque=$build/bin/masque
[ -x "$masque" ] || { echo "types.sh: $masque not found (scripts/setup.sh)" >&2; exit 2; }
[ -e "$data/run/last" ] || { echo "types.sh: no trained model in $data/run/last (bench/langid/run.sh)" >&2; exit 2; }
out=$data/types
mkdir -p "$out"
set --
for dtype in f32 bf16 int8 int4; do
  if "$masque" run "$root/pipelines/langid.yaml" --input-format tsv -q \
    --threads "${THREADS:-2}" -i "$data/test.tsv" -o "$out/$dtype.jsonl" \
    --set model.matmul_dtype="$dtype" --set task.top_k=0 --set task.return_logits=true \
    --summary "$out/$dtype.summary.json" 2>"$out/$dtype.err"; then
    set -- "$@" "$dtype=$out/$dtype.jsonl"
  else
    echo "types.sh: $dtype: $(tail -1 "$out/$dtype.err")" >&2
  fi
done
python3 "$root/bench/langid/compare_types.py" "$data/test.tsv" "$@"
