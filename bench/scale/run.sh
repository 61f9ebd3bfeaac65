#!/bin/sh
# Scale-out benchmark (issue 20): masque run as one process and under mpirun with 1 and 2 ranks
# on the same corpus, in the same run; prints records/s, the scaling and the cost of the MPI
# path at one rank against a plain run.
#
#   bench/scale/run.sh [BUILD_DIR]      (default: build; needs bin/masque built with MPI)
#
# Environment: ROUNDS=3 (each round runs every configuration once, interleaved), LINES=20000
# (lm-score corpus), WORDS=6000 (translate corpus), SCRATCH=bench/out/scale (not committed).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
[ -x "$build/bin/masque" ] || { echo "run.sh: $build/bin/masque not found (build first)" >&2; exit 2; }
"$build/bin/masque" --version | grep -q "MPI: Open MPI" ||
  { echo "run.sh: $build/bin/masque is built without MPI (masque --version)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "run.sh: mpirun not found (apt install openmpi-bin)" >&2; exit 2; }
exec python3 "$root/bench/scale/bench.py" --build "$build" --root "$root" \
  --scratch "${SCRATCH:-$root/bench/out/scale}" --rounds "${ROUNDS:-3}" \
  --lines "${LINES:-20000}" --words "${WORDS:-6000}"
