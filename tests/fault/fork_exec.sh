#!/bin/bash
# crest's fork and exec of criu beside threads that take an interposer's
# lock (fork_exec.c says why). The program runs in a session of its own so
# that a child left hung is killed with it.
set -uo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
: "${FORK_EXEC:?}" "${FAULTSHIM:?}"
T=$(mktemp -d /tmp/crest-forkexec.XXXXXX)
trap 'rm -rf "$T"' EXIT
printf '#!/bin/sh\necho "Version: 4.1.1"\n' >"$T/criu" && chmod +x "$T/criu"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=0:verify_asan_link_order=0}
CREST_CRIU=$T/criu LD_PRELOAD=$FAULTSHIM CREST_FAULT_TRACE=/dev/null \
	setsid --wait "$FORK_EXEC" "${ROUNDS:-400}" 20 &
pid=$!
wait "$pid"
rc=$?
pkill -9 -s "$pid" 2>/dev/null
exit "$rc"
