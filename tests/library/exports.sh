#!/bin/bash
# Issue 11: what libcrest shows a user's link is exactly the functions
# include/crest.h declares, nothing of crest's insides (crest_errf,
# crest_fault_*, crc32c, par_run, ...).
#
#   exports.sh [LIB]     LIB: libcrest.so (its dynamic symbols, nm -D) or
#                        libcrest.a (every global its members define, nm -g);
#                        default $LIBCREST. CREST_H names include/crest.h.
#
# Fails listing what is global and not declared, and the reverse.
set -euo pipefail
lib=${1:-${LIBCREST:-}}
: "${lib:?name libcrest.so or libcrest.a (argument or LIBCREST)}" "${CREST_H:?CREST_H must name include/crest.h}"
case "$lib" in
*.a) what="libcrest.a defines as global"; nmopt=(-g) ;;
*) what="libcrest.so exports"; nmopt=(-D) ;;
esac
# Every defined global (T, D, B, R, W, V, i, u ...): lines "address type name";
# an archive's member headers and blank lines have fewer fields.
exported=$(nm "${nmopt[@]}" --defined-only "$lib" | awk 'NF == 3 {print $3}' | LC_ALL=C sort -u)
declared=$(grep -oE '[ *]crest_[a-z_0-9]+\(' "$CREST_H" | tr -d ' *(' | LC_ALL=C sort -u)
extra=$(LC_ALL=C comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(LC_ALL=C comm -13 <(echo "$exported") <(echo "$declared"))
[ -z "$extra" ] || { echo "FAIL: $what what crest.h does not declare:" $extra; exit 1; }
[ -z "$missing" ] || { echo "FAIL: crest.h declares what $lib lacks:" $missing; exit 1; }
echo "ok: $what the $(echo "$declared" | wc -l) functions of crest.h and nothing else"
