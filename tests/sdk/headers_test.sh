#!/usr/bin/env bash
# Every installed public header compiles on its own, with nothing but the install's include
# directory and the system's: no header relies on an internal one (core/src) or on being
# included after another.
source "$(dirname "$0")/sdk_common.sh"

prefix=$work/prefix
install_masque "$prefix"
headers=("$prefix"/include/masque/*.hpp)
((${#headers[@]} > 0)) || fail "no headers installed in $prefix/include/masque"
for kind in plugin params error tensor mask model decoder tokenizer decoding abi; do
  [ -f "$prefix/include/masque/$kind.hpp" ] || fail "masque/$kind.hpp is not installed"
done

step "compiling ${#headers[@]} headers one by one"
# One translation unit per header, including it the way plugins do; two compilers at a time.
printf '%s\n' "${headers[@]##*/}" |
  xargs -P 2 -I{} sh -c 'printf "#include <masque/%s>\n" "$3" |
      "$1" -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I"$2/include" -x c++ - ||
      { echo "masque/$3 does not compile on its own" >&2; exit 1; }' \
      sh "$MASQUE_CXX" "$prefix" {} ||
  fail "some installed headers do not compile on their own (see above)"
step "ok"
