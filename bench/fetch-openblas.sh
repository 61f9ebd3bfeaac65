#!/bin/sh
# Unpacks Debian's OpenBLAS (libopenblas0-pthread) into BUILD_DIR/openblas, without installing
# it: the benchmarks then run PyTorch on it through LD_LIBRARY_PATH, while every other program
# keeps the system's libblas.so.3. Debian's PyTorch runs its float matmuls on whatever
# libblas.so.3 the loader finds; without OpenBLAS that is the reference BLAS (libblas3).
#
#   bench/fetch-openblas.sh [BUILD_DIR]        (default: build)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
dest="$build/openblas"
lib="$dest/usr/lib/x86_64-linux-gnu/openblas-pthread"
if [ -e "$lib/libblas.so.3" ]; then
  echo "$lib"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# (apt warns that it downloads as root into a folder its _apt user cannot read: harmless)
(cd "$work" && apt-get download libopenblas0-pthread >"$work/log" 2>&1) ||
  { cat "$work/log" >&2; echo "fetch-openblas.sh: apt-get download libopenblas0-pthread failed" >&2; exit 1; }
mkdir -p "$dest"
dpkg -x "$work"/libopenblas0-pthread_*.deb "$dest"
[ -e "$lib/libblas.so.3" ] || { echo "fetch-openblas.sh: no libblas.so.3 in the package" >&2; exit 1; }
echo "$lib"
