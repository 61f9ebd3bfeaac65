#!/usr/bin/env bash
# Builds the Debian package from a configured build (scripts/setup.sh), checks it with lintian,
# installs it with apt and runs the installed masque from a temporary directory.
#
#   scripts/package.sh              uses ./build (BUILD_DIR=... for another)
#   scripts/package.sh --no-install builds and checks the package only
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SHARED=$(cd .. && pwd)/shared

cmake --build "$BUILD_DIR" -j "$(nproc)"
rm -f "$BUILD_DIR"/masque_*.deb
(cd "$BUILD_DIR" && cpack -G DEB >cpack.log 2>&1) || {
  cat "$BUILD_DIR/cpack.log" >&2
  exit 1
}
deb=$(ls "$BUILD_DIR"/masque_*.deb)
echo "package: $deb" >&2
dpkg-deb --info "$deb" | sed -n '/Depends/p' >&2

# lintian: errors fail the step; warnings are printed.
lintian --fail-on error "$deb" >&2 || {
  echo "package: lintian reports errors" >&2
  exit 1
}
[ "${1:-}" = "--no-install" ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$(realpath "$deb")" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
command -v masque | grep -qx /usr/bin/masque
masque --version >&2
# A ready pipeline and a model folder, from a directory with no build tree in sight.
echo "Once upon a time" | masque run /usr/share/masque/pipelines/lm-score.yaml -q \
  --set model.path="$SHARED/models/stories260k" --set tokenizer.path="$SHARED/models/stories260k" \
  > ready.jsonl
echo "Once upon a time" | masque run --task lm-score --model "$SHARED/models/stories260k" -q \
  > folder.jsonl
cmp ready.jsonl folder.jsonl
grep -q '"ppl"' ready.jsonl
# grep reads all of its input: -q would quit at the first match and end masque with SIGPIPE.
masque plugins | grep '^model *llama' >/dev/null
# The man page is installed and renders; bash completion is in place.
MANPAGER=cat man masque 2>/dev/null | grep 'masque run' >/dev/null
test -f /usr/share/bash-completion/completions/masque
# Completion of a command, an option of `masque run`, and a plugin name.
completions=$(bash -c 'source /usr/share/bash-completion/bash_completion
  source /usr/share/bash-completion/completions/masque
  complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    _masque; echo "${COMPREPLY[*]}"; }
  complete_words masque ins; complete_words masque run --mod; complete_words masque plugins lla')
[ "$completions" = "$(printf 'inspect\n--model\nllama')" ] || {
  echo "package: bash completion gave: $completions" >&2
  exit 1
}
echo "package: installed masque runs from $work; man masque and completion present" >&2
