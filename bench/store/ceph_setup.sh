# ceph_setup.sh - sourced by the benches on a Ceph cluster (rados_bench.sh,
# rados_design.sh), after `set -euo pipefail`: ceph_setup NAME checks that
# Ceph's tools are installed, makes the work directory $work (removed on
# exit) and, unless CEPH_CONF names a cluster, starts a one-node one there
# (scripts/ceph-cluster.sh, its OSD a 40 GiB sparse file; stopped on exit)
# and sets $own to it. The pool is $pool (CREST_CEPH_POOL, default crest);
# CEPH_CONF is exported.
ceph_setup() {
	local name=$1 cluster
	cluster=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/ceph-cluster.sh
	command -v rados >/dev/null || {
		echo "$name: rados is missing: Ceph's packages are not installed (scripts/setup.sh --deps-only)" >&2
		exit 1
	}
	pool=${CREST_CEPH_POOL:-crest}
	work=$(mktemp -d "${TMPDIR:-/var/tmp}/${name%.sh}.XXXXXX")
	own=
	CEPH_CLUSTER_SCRIPT=$cluster
	trap '[ -z "$own" ] || bash "$CEPH_CLUSTER_SCRIPT" stop "$own" || true; rm -rf "$work"' EXIT
	if [ -z "${CEPH_CONF:-}" ]; then
		own=$work/cluster
		eval "$(CREST_CEPH_OSD_GIB=40 CREST_CEPH_POOL=$pool bash "$cluster" start "$own")"
	fi
	export CEPH_CONF
}
