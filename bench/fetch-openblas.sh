#!/bin/sh
# Unpacks Debian's OpenBLAS (libopenblas0-pthread) into BUILD_DIR/openblas, without installing
# it: the benchmarks then run PyTorch on it through LD_LIBRARY_PATH, while every other program
# keeps the system's libblas.so.3. Debian's PyTorch runs its float matmuls on whatever
# libblas.so.3 the loader finds; without OpenBLAS that is the reference BLAS (libblas3).
#
#   bench/fetch-openblas.sh [BUILD_DIR]          unpack (once) and print the library directory
#   bench/fetch-openblas.sh --find [BUILD_DIR]   only print it: $OPENBLAS_DIR when set, else the
#                                                unpacked one; exit 1 when it has no libblas.so.3
# (BUILD_DIR defaults to build.) The benchmarks' run.sh scripts find OpenBLAS through --find.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
find_only=no
if [ "${1:-}" = --find ]; then
  find_only=yes
  shift
fi
build=${1:-$root/build}
dest="$build/openblas"
lib="$dest/usr/lib/x86_64-linux-gnu/openblas-pthread"
if [ "$find_only" = yes ]; then
  dir=${OPENBLAS_DIR:-$lib}
  [ -e "$dir/libblas.so.3" ] || exit 1
  echo "$dir"
  exit 0
fi
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
