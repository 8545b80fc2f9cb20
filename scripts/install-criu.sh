#!/usr/bin/env bash
# Installs CRIU 4.2 or later from Debian "sid" into a private prefix, for crest's tests and CI.
#
# Why: Debian 12's criu 3.17 fails on the kernels we run on ("vdso: Unexpected rt vDSO area
# bounds"), and Debian 13 "trixie"'s criu 4.1.1 cannot dump a process holding any AF_INET
# socket on kernels >= 6.16 (os/CRIU-NOTES.md); sid's 4.2.x can. It needs sid's libc. So we
# fetch criu and every library it depends on (libc6 included) with apt, using a private apt
# configuration that knows about that suite (the system's sources and its libc are never
# touched), unpack the .debs with dpkg-deb -x into PREFIX, and write PREFIX/criu, a wrapper
# that starts criu through the suite's own dynamic loader with the prefix's library
# directories.
#
# Usage: scripts/install-criu.sh [PREFIX]      (default: $CRIU_PREFIX, else <repo>/.deps/criu)
#   CRIU_DEBIAN_SUITE=trixie picks criu 4.1.1 instead (then any 4.x is accepted; remove
#   PREFIX to go back from 4.2 to it). CRIU_DEBIAN_MIRROR overrides the mirror (default
#   http://deb.debian.org/debian).
# Needs root (criu itself needs it anyway) and network access to a Debian mirror.
# Idempotent: does nothing but `criu check` when PREFIX/criu --version already says 4.2 or
# later (4.x with CRIU_DEBIAN_SUITE=trixie). An older criu there (a checkout that ran this
# script when it installed trixie's 4.1.1) is replaced: that is the upgrade.
set -euo pipefail

die() { echo "install-criu: error: $*" >&2; exit 1; }
log() { echo "install-criu: $*" >&2; }

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
prefix=${1:-${CRIU_PREFIX:-$repo_root/.deps/criu}}
mirror=${CRIU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${CRIU_DEBIAN_SUITE:-sid}   # sid has criu 4.2.x, trixie 4.1.1 (see os/CRIU-NOTES.md)
# The oldest criu this prefix may keep: 4.2 (AF_INET sockets on new kernels), unless the
# caller asked for another suite on purpose.
case "$suite" in
    sid|unstable) min_minor=2 ;;
    *) min_minor=0 ;;
esac
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
arch=amd64
triplet=x86_64-linux-gnu

[ "$(uname -m)" = x86_64 ] || die "only x86_64 is supported (this machine is $(uname -m))"

mkdir -p "$prefix" || die "cannot create prefix $prefix"
prefix=$(cd "$prefix" && pwd -P)

# The version PREFIX/criu says ("4.1.1"), or nothing when there is none that runs.
criu_version() {
    [ -x "$prefix/criu" ] || return 0
    "$prefix/criu" --version 2>/dev/null | sed -n 's/^Version: *//p' | head -n1 || true
}

# criu --version prints "Version: 4.2.1"; 4.<min_minor> or later is good enough.
criu_is_current() {
    local v major minor
    v=$(criu_version)
    [ -n "$v" ] || return 1
    major=${v%%.*}
    minor=${v#*.}
    minor=${minor%%.*}
    case "$major$minor" in
        *[!0-9]*|"") return 1 ;;
    esac
    [ "$major" -gt 4 ] || { [ "$major" -eq 4 ] && [ "$minor" -ge "$min_minor" ]; }
}

run_check() {
    # criu check may print warnings (and exit non-zero for optional features on some
    # kernels); we only insist that criu starts and reports its version.
    "$prefix/criu" --version >/dev/null 2>&1 || die "$prefix/criu cannot start: $("$prefix/criu" --version 2>&1 | head -n3)"
    log "criu: $("$prefix/criu" --version | head -n1)"
    log "running: $prefix/criu check"
    local rc=0 out
    out=$("$prefix/criu" check 2>&1) || rc=$?
    printf '%s\n' "$out" | sed 's/^/  criu check: /' >&2
    if [ "$rc" -eq 0 ]; then
        log "criu check: passed"
    else
        log "criu check: exited $rc (warnings above; not fatal)"
    fi
}

if criu_is_current; then
    log "criu $(criu_version) already installed in $prefix; skipping download"
    run_check
    exit 0
fi
old=$(criu_version)
[ -z "$old" ] || log "criu $old in $prefix is older than 4.$min_minor: replacing it with $suite's"

command -v apt-get >/dev/null || die "apt-get not found (Debian or derivative required)"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"
[ -r "$keyring" ] || die "Debian archive keyring $keyring missing (install debian-archive-keyring)"
[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get update with a private state directory needs it)"

# Private apt state: everything apt reads or writes lives under $aptdir, so the system's
# sources, lists, package cache and dpkg status stay as they are. An empty dpkg status makes
# apt-cache list the full dependency closure rather than what the host happens to have.
aptdir=$prefix/.apt
# Lists of another suite (an earlier install of trixie's criu) must not mix with this one's.
[ ! -f "$aptdir/sources.list" ] || grep -qF " $suite main" "$aptdir/sources.list" || rm -rf "$aptdir/lists"
mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial" "$aptdir/debs"
echo "deb [signed-by=$keyring] $mirror $suite main" >"$aptdir/sources.list"
: >"$aptdir/status"
apt_opts=(
    -o "Dir::Etc::SourceList=$aptdir/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "Dir::State::Lists=$aptdir/lists"
    -o "Dir::State::status=$aptdir/status"
    -o "Dir::Cache=$aptdir/cache"
    -o "APT::Architecture=$arch"
    -o "APT::Architectures=$arch"
    -o "Acquire::Languages=none"
    # Our private dirs belong to root; apt's _apt sandbox user could not write them.
    -o "APT::Sandbox::User=root"
)

log "fetching the $suite package index from $mirror (private apt state in $aptdir)"
apt-get "${apt_opts[@]}" -q update >"$aptdir/update.log" 2>&1 ||
    die "apt-get update for $suite failed (see $aptdir/update.log): $(tail -n3 "$aptdir/update.log")"
# apt-get update exits 0 when a mirror cannot be reached (it only warns), so check that an
# index actually arrived.
compgen -G "$aptdir/lists/*_Packages*" >/dev/null ||
    die "no $suite package index was fetched from $mirror (see $aptdir/update.log): $(grep -E '^(W|E):' "$aptdir/update.log" | head -n3)"

# Dependency closure of criu in the suite: hard Depends/Pre-Depends only (Recommends such as
# iproute2 and python3-pycriu are not needed to dump and restore). Lines starting with a
# space are the dependency edges; the others are the package names of the closure.
mapfile -t pkgs < <(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends \
    --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances criu |
    grep -v '^ ' | grep -v '^<' | sort -u)
[ "${#pkgs[@]}" -gt 0 ] || die "apt-cache depends found no packages for criu in $suite"
# (Plain word matching: grep -q in a pipeline could trip pipefail with SIGPIPE.)
[[ " ${pkgs[*]} " == *" criu "* ]] || die "criu is not in $suite's index"
[[ " ${pkgs[*]} " == *" libc6 "* ]] || die "libc6 is missing from criu's dependency closure"
log "packages (${#pkgs[@]}): ${pkgs[*]}"

rm -f "$aptdir"/debs/*.deb
(cd "$aptdir/debs" && apt-get "${apt_opts[@]}" -q download "${pkgs[@]}") >"$aptdir/download.log" 2>&1 ||
    die "apt-get download failed (see $aptdir/download.log): $(tail -n3 "$aptdir/download.log")"

# Unpack into a fresh root so that files of an older attempt cannot linger.
root=$prefix/root.new
rm -rf "$root"
mkdir -p "$root"
for deb in "$aptdir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$root" || die "dpkg-deb -x $deb into $root failed"
done

# trixie and sid are merged-/usr: libc6 ships /usr/lib/$triplet/ld-linux-x86-64.so.2. Recreate the
# usual top-level links so that PREFIX/lib/$triplet/ld-linux-x86-64.so.2 resolves as well.
for d in lib lib64 bin sbin; do
    if [ -d "$root/usr/$d" ] && [ ! -e "$root/$d" ]; then
        ln -s "usr/$d" "$root/$d"
    fi
done
[ -x "$root/usr/sbin/criu" ] || die "criu binary not found at usr/sbin/criu in the unpacked packages"
[ -x "$root/usr/lib/$triplet/ld-linux-x86-64.so.2" ] || die "$suite's ld-linux-x86-64.so.2 not found after unpacking"

# Move the new tree into place (replacing the previous one, if any).
for d in usr lib lib64 bin sbin etc var; do
    rm -rf "${prefix:?}/$d"
done
for e in "$root"/* ; do
    mv "$e" "$prefix/"
done
rmdir "$root"

# Every directory of the prefix that holds shared objects, relative to the prefix, following
# the links above only once (usr/lib/... and lib/... are the same directory).
mapfile -t libdirs < <(cd "$prefix" && find usr -name '*.so*' \( -type f -o -type l \) -printf '%h\n' | grep -v '/gconv$' | sort -u)
[ "${#libdirs[@]}" -gt 0 ] || die "no shared libraries found under $prefix/usr"
# shellcheck disable=SC2016  # $p is meant literally: the wrapper expands it at run time.
libpath_rel=$(printf ':$p/%s' "${libdirs[@]}")
libpath_rel=${libpath_rel#:}

# The wrapper finds its prefix at run time, so the tree can be moved as a whole. It runs
# criu through the suite's loader: criu never sees the host's libc, and programs criu executes
# (iptables, ip, action scripts) run with the host's own libraries, since no LD_* variable
# is set.
cat >"$prefix/criu.new" <<EOF
#!/bin/sh
# Runs criu from Debian $suite through its own dynamic loader (made by
# scripts/install-criu.sh). Use it exactly like criu: PREFIX/criu dump -t PID ...
p=\$(cd "\$(dirname "\$0")" && pwd -P) || exit 1
exec "\$p/lib/$triplet/ld-linux-x86-64.so.2" --library-path "$libpath_rel" "\$p/usr/sbin/criu" "\$@"
EOF
chmod 0755 "$prefix/criu.new"
mv "$prefix/criu.new" "$prefix/criu"

# Verify that every library criu needs resolves inside the prefix.
libpath_abs=$(printf ":$prefix/%s" "${libdirs[@]}")
libpath_abs=${libpath_abs#:}
ldlist=$("$prefix/lib/$triplet/ld-linux-x86-64.so.2" --library-path "$libpath_abs" --list "$prefix/usr/sbin/criu" 2>&1) ||
    die "the loader cannot load criu: $ldlist"
if echo "$ldlist" | grep -q 'not found'; then
    die "criu has unresolved libraries: $(echo "$ldlist" | grep 'not found')"
fi
if echo "$ldlist" | grep '=>' | grep -v "$prefix/" | grep -q .; then
    die "criu would load libraries from outside $prefix: $(echo "$ldlist" | grep '=>' | grep -v "$prefix/")"
fi

criu_is_current || die "$prefix/criu --version does not report 4.$min_minor or later: $("$prefix/criu" --version 2>&1 | head -n3)"
log "installed criu into $prefix"
run_check
