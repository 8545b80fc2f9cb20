#!/bin/bash
# Issue 11: libcrest.so exports exactly the functions include/crest.h
# declares, nothing of crest's insides (crest_errf, crest_fault_*, ...).
# Fails listing what is exported and not declared, and the reverse.
set -euo pipefail
: "${LIBCREST:?LIBCREST must name libcrest.so}" "${CREST_H:?CREST_H must name include/crest.h}"
exported=$(nm -D --defined-only "$LIBCREST" | awk '$2 ~ /^[TWDBR]$/ {print $3}' | LC_ALL=C sort -u)
declared=$(grep -oE '[ *]crest_[a-z_0-9]+\(' "$CREST_H" | tr -d ' *(' | LC_ALL=C sort -u)
extra=$(LC_ALL=C comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(LC_ALL=C comm -13 <(echo "$exported") <(echo "$declared"))
[ -z "$extra" ] || { echo "FAIL: libcrest.so exports what crest.h does not declare:" $extra; exit 1; }
[ -z "$missing" ] || { echo "FAIL: crest.h declares what libcrest.so does not export:" $missing; exit 1; }
echo "ok: libcrest.so exports the $(echo "$declared" | wc -l) functions of crest.h and nothing else"
