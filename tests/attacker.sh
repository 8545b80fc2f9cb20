# attacker.sh - sourced by the symlink-attack tests after their suite's
# lib.sh (which defines T, fail and cleanup), as root: a second user,
# removed on exit, that as_user runs commands as; a root-only file SECRET
# and an empty root-only directory OUT; `untouched WHAT` fails unless both
# are as they were (bytes and mode of SECRET; nothing in OUT).
U=crest-attacker-$$
useradd -M -N -s /usr/sbin/nologin "$U" || fail "cannot create user $U"
trap 'userdel "$U" 2>/dev/null; cleanup' EXIT
as_user() { setpriv --reuid="$U" --regid="$(id -g "$U")" --clear-groups "$@"; }
SECRET=$T/secret
head -c $((1000 + RANDOM)) /dev/urandom >"$SECRET"
chmod 600 "$SECRET"
cp -p "$SECRET" "$T/secret.orig"
OUT=$T/out
mkdir -m 700 "$OUT"
untouched() {
	cmp -s "$SECRET" "$T/secret.orig" || fail "$1: root's file $SECRET was changed"
	[ "$(stat -c %a "$SECRET")" = 600 ] || fail "$1: root's file $SECRET was chmod-ed"
	[ -z "$(ls -A "$OUT")" ] || fail "$1: crest wrote into $OUT: $(ls -A "$OUT")"
}
