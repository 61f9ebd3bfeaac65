# Shared by the SDK tests: settings from CTest (tests/sdk/CMakeLists.txt), a scratch folder
# removed on exit, and masque installed into it.
set -euo pipefail

: "${MASQUE_BUILD_DIR:?set by CTest: the masque build to install}"
: "${MASQUE_SOURCE_DIR:?set by CTest: the masque source tree}"
: "${MASQUE_SHARED_DIR:=$(dirname "$MASQUE_SOURCE_DIR")/shared}"
: "${MASQUE_CMAKE:=cmake}"
: "${MASQUE_CXX:=c++}"

work=$(mktemp -d "${TMPDIR:-/tmp}/masque-sdk-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

step() { printf -- '--- %s\n' "$*"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# install_masque PREFIX: what `cmake --install` of the build puts there.
install_masque() {
  "$MASQUE_CMAKE" --install "$MASQUE_BUILD_DIR" --prefix "$1" >"$work/install.log" ||
    fail "cmake --install $MASQUE_BUILD_DIR failed: $(cat "$work/install.log")"
}
