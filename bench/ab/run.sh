#!/bin/sh
# Two masque builds on bench/lm's and bench/encdec's work in one run (see ab.py and README.md).
#
#   bench/ab/run.sh BASELINE_BUILD CANDIDATE_BUILD      environment: ROUNDS=3, ONLY=<substring>
#
# Make a baseline build of an older commit without touching this checkout, e.g.:
#   git worktree add /tmp/masque-base 601c499 && (cd /tmp/masque-base && BUILD_TYPE=Release scripts/setup.sh)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: bench/ab/run.sh BASELINE_BUILD CANDIDATE_BUILD" >&2; exit 2; }
for b in "$1" "$2"; do
  [ -x "$b/bin/masque" ] || { echo "run.sh: $b/bin/masque not found (build it first)" >&2; exit 2; }
done
exec /usr/bin/python3 "$root/bench/ab/ab.py" "$1" "$2" --rounds "${ROUNDS:-3}" --only "${ONLY:-}"
