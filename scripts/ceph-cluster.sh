#!/bin/bash
# ceph-cluster.sh start DIR | stop DIR | env DIR
#
# A throwaway one-node Ceph for the tests and benchmarks of the store's
# rados backend (issue 35): one monitor, one manager and one OSD on
# bluestore in a sparse file, all of it under DIR (configuration, monitor,
# manager and OSD data, logs, admin sockets, pid files), listening on
# 127.0.0.1 only, no authentication, no systemd. Pools have one replica.
#
#   start DIR  makes a new cluster in DIR (what an earlier one left there is
#              removed first; a running one is refused), waits until the OSD
#              is up and a real write succeeds, creates the pool
#              $CREST_CEPH_POOL (default crest), and prints the environment
#              the clients need as `export` lines (eval them).
#   stop DIR   stops the daemons by the PIDs recorded at start: manager and
#              OSD first, the monitor last (without a monitor an OSD takes
#              5 s to exit). Waits until they are gone, then removes the
#              cluster's data (the OSD's file among it) and keeps the
#              configuration and the logs. Idempotent.
#   env DIR    prints the `export` lines again.
#
# The OSD and manager bind ports of Ceph's own range (6800-7300), trying the
# next on a conflict; the monitor's port is fixed in the configuration, so
# a free one is picked at start. Two clusters in two DIRs can run at once.
# CREST_CEPH_TIMEOUT (60) bounds each wait of start, in seconds.
# CREST_CEPH_OSD_GIB (10) is the size of the OSD's sparse file: the disk
# space the cluster may take. rados bench wrote 9.6 GB in 10 s here, past a
# 10 GiB OSD's full ratio (95%), after which every write waits.
#
# Exit status: 0 done, 1 failed (one line saying why, and on a failed start
# the tail of the daemon's log; nothing is left running), 2 bad usage
# (a wrong command or operand count, a malformed CREST_CEPH_* setting).
#
# Timings (2026-11-28, the 2-core development VM, Ceph 16.2.15 from Debian
# 12, three cycles each): start 4.4-4.5 s to the first write read back
# (before bluestore_fsck_on_mkfs was off: 4.3-6.1 s), of which the OSD's
# mkfs takes 1.4 s and its boot 2 s; stop 0.13-0.40 s. A start whose
# monitor dies fails within 0.1 s.
set -euo pipefail

usage() {
	echo "usage: scripts/ceph-cluster.sh start DIR | stop DIR | env DIR" >&2
	exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
case $cmd in start | stop | env) ;; *) usage ;; esac
[ -n "$2" ] || usage
# Absolute: the configuration names every path in DIR, and the daemons run
# from / (a relative path would mean another place to them).
dir=$(realpath -m -- "$2")
conf=$dir/ceph.conf
pool=${CREST_CEPH_POOL:-crest}
timeout_s=${CREST_CEPH_TIMEOUT:-60}
osd_gib=${CREST_CEPH_OSD_GIB:-10}
# The daemons in the order they are stopped: the monitor last.
daemons=(mgr.x osd.0 mon.a)

die() {
	echo "ceph-cluster.sh: $*" >&2
	exit 1
}
# A malformed setting is bad usage too.
bad() {
	echo "ceph-cluster.sh: $*" >&2
	exit 2
}

# A recorded PID that is still one of this cluster's daemons. A PID alone
# could have been reused by another process after a crash: the process must
# also be the daemon named, run with this DIR's configuration.
live_pid() {  # live_pid NAME -> prints the PID, or fails
	local f=$dir/run/$1.pid pid cmdline
	[ -f "$f" ] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
	[[ $cmdline == *"ceph-${1%%.*} "*"-c $conf "* ]] || return 1
	echo "$pid"
}

# Whether PID still runs. A daemon that has exited stays a zombie until its
# parent reaps it, and once this script has exited its parent is init,
# which may be slow to (2 s on the development VM): a zombie counts as
# gone.
running() {  # running PID
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

# SIGTERM to each of NAMES still running, then wait for all of them; what
# is still there after 20 s gets SIGKILL.
stop_daemons() {  # stop_daemons NAME...
	local n pid pids=() left i
	for n in "$@"; do
		if pid=$(live_pid "$n"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
	done
	for ((i = 0; i < 400 && ${#pids[@]} > 0; i++)); do
		left=()
		for pid in "${pids[@]}"; do
			running "$pid" && left+=("$pid")
		done
		pids=("${left[@]}")
		[ ${#pids[@]} -eq 0 ] || sleep 0.05
	done
	for pid in "${pids[@]}"; do
		echo "ceph-cluster.sh: pid $pid did not stop on SIGTERM in 20 s; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		while running "$pid"; do sleep 0.05; done
	done
	for n in "$@"; do rm -f "$dir/run/$n.pid" "$dir/run/ceph-$n.asok"; done
}

stop_all() {
	[ -d "$dir/run" ] || return 0
	stop_daemons mgr.x osd.0
	stop_daemons mon.a
	# No start uses a stopped cluster's data again: the disk it took goes
	# back now (the OSD's file holds up to what was written, GBs after a
	# benchmark). The configuration and logs stay.
	rm -rf "$dir/mon" "$dir/osd" "$dir/mgr" "$dir/crash" "$dir/monmap"
}

# The pool is the one start made, recorded in DIR, whatever
# CREST_CEPH_POOL says now.
print_env() {
	printf 'export CEPH_CONF=%q\n' "$conf"
	printf 'export CREST_CEPH_POOL=%q\n' "$(<"$dir/pool")"
}

case $cmd in
stop)
	stop_all
	exit 0
	;;
env)
	if [ ! -f "$conf" ] || [ ! -f "$dir/pool" ]; then
		die "no cluster started in $dir (run start first)"
	fi
	print_env
	exit 0
	;;
esac

# ---- start ----
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || bad "CREST_CEPH_TIMEOUT must be a whole number of seconds, not '$timeout_s'"
[[ $osd_gib =~ ^[1-9][0-9]*$ ]] || bad "CREST_CEPH_OSD_GIB must be a whole number of GiB, not '$osd_gib'"
for b in ceph-mon ceph-osd ceph-mgr ceph rados monmaptool python3 timeout; do
	command -v "$b" >/dev/null ||
		die "$b is missing: Ceph's packages are not installed (scripts/setup.sh --deps-only installs them)"
done
for n in "${daemons[@]}"; do
	live_pid "$n" >/dev/null && die "a cluster is running in $dir ($n); stop it first"
done
# Admin sockets are unix sockets: their path must fit in 107 bytes.
sock_max="$dir/run/ceph-mgr.x.asok"
[ ${#sock_max} -le 107 ] || die "$dir is too long a path for the daemons' unix sockets (at most $((107 - 23)) bytes)"

# What an earlier cluster left: only the names this script makes.
mkdir -p "$dir" || die "cannot make $dir"
rm -rf "$dir/mon" "$dir/osd" "$dir/mgr" "$dir/run" "$dir/log" "$dir/crash" "$dir/monmap" "$conf" "$dir/pool"
mkdir -p "$dir/mon" "$dir/osd" "$dir/mgr" "$dir/run" "$dir/log" "$dir/crash"

# Whatever fails from here leaves nothing running.
fail() {  # fail MESSAGE [LOG]
	echo "ceph-cluster.sh: $1" >&2
	if [ -n "${2:-}" ] && [ -f "$2" ]; then
		echo "--- last lines of $2:" >&2
		tail -n 25 "$2" >&2
	fi
	stop_all
	exit 1
}
trap 'stop_all' EXIT

# A free port for the monitor: one the kernel hands out for port 0, so not
# one another cluster's monitor holds.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
	fail "cannot find a free port on 127.0.0.1"
fsid=$(cat /proc/sys/kernel/random/uuid)
osd_uuid=$(cat /proc/sys/kernel/random/uuid)

cat >"$conf" <<EOF
# A throwaway one-node cluster made by scripts/ceph-cluster.sh.
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$port
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
# Protocol v2 only: one port for the monitor, nothing on 6789.
ms_bind_msgr1 = false
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# One OSD: pools of one replica, placed on OSDs (not hosts).
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_autoscale_mode = off
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
# Warnings that a one-node cluster on a shared disk would always raise.
mon_warn_on_insecure_global_id_reclaim = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
mon_warn_on_pool_no_redundancy = false
mon_warn_on_pool_no_app = false
mon_data_avail_warn = 1
# Maps proposed and statistics reported every 0.1-1 s instead of 1-5 s: a
# cluster ready in seconds, not tens of them.
paxos_propose_interval = 0.1
mgr_stats_period = 1
mon_mgr_digest_period = 1
crash_dir = $dir/crash

# Admin sockets and logs for the daemons only: a client's would
# collide with the next client's.
[mon]
mon_data = $dir/mon/\$name
admin_socket = $dir/run/\$cluster-\$name.asok
log_file = $dir/log/\$name.log
mon_cluster_log_file = $dir/log/cluster.log
[mgr]
mgr_data = $dir/mgr/\$name
admin_socket = $dir/run/\$cluster-\$name.asok
log_file = $dir/log/\$name.log
[osd]
osd_data = $dir/osd/\$name
admin_socket = $dir/run/\$cluster-\$name.asok
log_file = $dir/log/\$name.log
osd_objectstore = bluestore
# The block device is a sparse file that grows with what is written.
bluestore_block_create = true
bluestore_block_size = $((osd_gib << 30))
# No check of a store just made and thrown away after the run: half a
# second of the start.
bluestore_fsck_on_mkfs = false
# About 0.6-0.7 GiB at most under load, instead of the default 4 GiB.
osd_memory_target = 1073741824
EOF
export CEPH_CONF=$conf

# Each daemon runs in the foreground (-f) as this script's background job,
# so that its PID is known the moment it starts, before it could die. Its
# own log is DIR/log/NAME.log; what it prints, DIR/log/NAME.out. No stdio
# of ours stays open in it (a test runner waits for its output to close).
launch() {  # launch NAME ARGS...
	local n=$1
	shift
	"$@" -f -c "$conf" </dev/null >>"$dir/log/$n.out" 2>&1 &
	local pid=$! i
	echo "$pid" >"$dir/run/$n.pid"
	# Not this shell's job any more: its death is reported by all_alive(),
	# not by a "Killed" line from bash.
	disown
	# Until the child has exec'd the daemon its cmdline is this shell's,
	# and live_pid takes it for dead: a client command sent meanwhile was
	# killed as if the daemon had died (seen under load: "ceph osd new
	# failed" with nothing in its log). Return once it is the daemon, or
	# gone (then dead_daemon says so).
	for i in $(seq 1 1000); do
		live_pid "$n" >/dev/null && break
		running "$pid" || break
		sleep 0.01
	done
}
# The first daemon launched so far that is not running, if any.
dead_daemon() {
	local n
	for n in "${daemons[@]}"; do
		if [ -f "$dir/run/$n.pid" ] && ! live_pid "$n" >/dev/null; then
			echo "$n"
			return 0
		fi
	done
	return 1
}
# Fails the start, with the dead daemon's log, if one launched has died.
all_alive() {
	local n
	if n=$(dead_daemon); then
		fail "$n exited during start" "$dir/log/$n.log"
	fi
}
# A client command, bounded, and given up at once if a daemon dies: one
# sent to a cluster that cannot answer would otherwise wait for ever (a
# monitor that could not bind its port exits at once).
client() {  # client LOG COMMAND...
	local log=$1 pid
	shift
	timeout "$timeout_s" "$@" >>"$dir/log/$log" 2>&1 &
	pid=$!
	while running "$pid"; do
		if dead_daemon >/dev/null; then
			kill "$pid" 2>/dev/null || true
			wait "$pid" || true
			all_alive
		fi
		sleep 0.05
	done
	wait "$pid"
}
t0=$(date +%s%N)

monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >"$dir/log/mkfs.out" 2>&1 ||
	fail "monmaptool failed" "$dir/log/mkfs.out"
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >>"$dir/log/mkfs.out" 2>&1 ||
	fail "the monitor's mkfs failed" "$dir/log/mon.a.log"
launch mon.a ceph-mon -i a
launch mgr.x ceph-mgr -i x
# The OSD's id in the cluster's map; it answers once the monitor is up.
client start.out ceph osd new "$osd_uuid" || fail "ceph osd new failed" "$dir/log/start.out"
[ "$(tail -n1 "$dir/log/start.out")" = 0 ] || fail "ceph osd new did not give id 0" "$dir/log/start.out"
mkdir -p "$dir/osd/osd.0"
ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$dir/log/mkfs.out" 2>&1 ||
	fail "the OSD's mkfs failed" "$dir/log/mkfs.out"
# An unknown osd_objectstore would silently give another store.
[ "$(cat "$dir/osd/osd.0/type" 2>/dev/null)" = bluestore ] || fail "the OSD's store is not bluestore" "$dir/log/mkfs.out"
launch osd.0 ceph-osd -i 0
# Made while the OSD boots: the monitor alone makes a pool.
client start.out ceph osd pool create "$pool" 8 || fail "creating pool $pool failed" "$dir/log/start.out"
echo "$pool" >"$dir/pool"

# The OSD up in the map first: an operation sent before it is would wait
# for the client's next map poll (5 s). It logs the moment it sees itself up.
deadline=$((SECONDS + timeout_s))
until grep -q 'state: booting -> active' "$dir/log/osd.0.log" 2>/dev/null; do
	all_alive
	[ $SECONDS -lt $deadline ] || fail "osd.0 not up after $timeout_s s" "$dir/log/osd.0.log"
	sleep 0.1
done
# Then a real write and its read: the monitor reports health before the
# placement groups can take I/O.
probe=$dir/run/probe
head -c 4096 /dev/urandom >"$probe"
client start.out rados -p "$pool" put crest-cluster-probe "$probe" ||
	fail "a test write to pool $pool failed" "$dir/log/start.out"
if ! client start.out rados -p "$pool" get crest-cluster-probe "$probe.back" || ! cmp -s "$probe" "$probe.back"; then
	fail "a test read from pool $pool failed or differs" "$dir/log/start.out"
fi
client start.out rados -p "$pool" rm crest-cluster-probe || fail "removing the test object failed" "$dir/log/start.out"
rm -f "$probe" "$probe.back"
all_alive

trap - EXIT
t1=$(date +%s%N)
echo "ceph-cluster.sh: started in $(((t1 - t0) / 1000000)) ms: mon on 127.0.0.1:$port, pool $pool, in $dir" >&2
print_env
