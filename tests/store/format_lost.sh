#!/bin/bash
# Issue 32, item 3: a store whose FORMAT file is lost. Everything refuses
# it with one line that names the remedy, casctl repair; casctl repair
# writes FORMAT again when the directory is plainly a crest store (only a
# store's entries, and a meta log with a crest header: cas/store.c,
# format_lost), and then every snapshot is back. A directory that is not
# plainly a store (a file of someone else's in it, or no meta log) is
# refused by repair too, and left as it was.
. "$(dirname "$0")/lib.sh"
# The store is made on purpose, as a user must (crest init), not by --init.
unset CREST_INIT
"$CREST" --quiet init "$S" >/dev/null || fail "crest init $S"

seed=${CREST_TEST_SEED:-$$}
echo "random seed $seed (CREST_TEST_SEED=$seed reproduces the data)"
mkdir -p "$T/d"
"$STORE_TOOL" random "$T/d/f1" 300K "$seed"
put --tag one "$T/d"
"$STORE_TOOL" random "$T/d/f2" 200K $((seed + 1))
put --tag two "$T/d"
cp "$S/FORMAT" "$T/FORMAT.was"

note "FORMAT deleted: every command refuses it and names casctl repair"
rm "$S/FORMAT"
for cmd in "crest ls" "crest get one $T/out" "crest put $T/d" "casctl verify" "casctl stats"; do
	read -r -a argv <<<"$cmd"
	bin=$CREST
	[ "${argv[0]}" = casctl ] && bin=$CASCTL
	expect_error "$cmd" "$bin" "${argv[@]:1}"
	case $ERR in *"lost its FORMAT"*"casctl repair"*) ;; *) fail "$cmd: no remedy named: $ERR" ;; esac
done
[ ! -e "$S/FORMAT" ] || fail "a refused command wrote FORMAT"

expect_error "crest init of it" "$CREST" init "$S"
case $ERR in *"a crest store already"*"casctl repair"*) ;; *) fail "crest init: $ERR" ;; esac

note "casctl repair writes it again (with --init too: the store exists, only FORMAT is lost)"
CREST_INIT=1 "$CASCTL" repair >"$T/repair.out" 2>&1 || { cat "$T/repair.out"; fail "casctl repair"; }
sed 's/^/   | /' "$T/repair.out"
grep -q "FORMAT written again" "$T/repair.out" || fail "repair did not say it wrote FORMAT"
cmp "$S/FORMAT" "$T/FORMAT.was" || fail "FORMAT is not what it was: $(cat "$S/FORMAT")"
verify_store "after FORMAT was written again"
rm -rf "$T/out"
crest get one "$T/out" || fail "get one"
cmp "$T/d/f1" "$T/out/d/f1" || fail "one came back different"

note "not plainly a store: a file of someone else's beside it"
rm "$S/FORMAT"
echo mine >"$S/notes.txt"
expect_error "repair beside notes.txt" "$CASCTL" repair
case $ERR in *"not a crest store"*) ;; *) fail "repair beside a foreign file: $ERR" ;; esac
[ ! -e "$S/FORMAT" ] || fail "repair wrote FORMAT beside a foreign file"
rm "$S/notes.txt"

note "not plainly a store: no meta log"
mkdir -p "$T/nometa"
chmod 700 "$T/nometa"
mkdir -m 700 "$T/nometa/packs"
expect_error "repair without meta logs" "$CASCTL" --store "$T/nometa" repair
[ ! -e "$T/nometa/FORMAT" ] || fail "repair wrote FORMAT into a directory with no meta log"
"$CASCTL" repair >/dev/null 2>&1 || fail "the second repair"
verify_store "at the end"
echo PASS
