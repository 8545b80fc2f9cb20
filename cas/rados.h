/*
 * rados.h - what the RADOS implementations of cas/'s tables share
 * (objects_rados.c, locks_rados.c): librados.so.2, loaded with dlopen at
 * the first use, as the CUDA driver is, so that crest, libcrest and the
 * GPU machine's bundle link none of Ceph and a machine without it says so
 * when a rados: store is named; and the connection to a store's pool and
 * namespace, "POOL[/NAMESPACE]", on the cluster CEPH_CONF names.
 * Only in a build where librados' headers are found (CREST_HAVE_RADOS).
 */
#ifndef CREST_CAS_RADOS_H
#define CREST_CAS_RADOS_H

#ifdef CREST_HAVE_RADOS
#include <rados/librados.h>

/* The librados calls cas/ uses. */
#define CAS_RADOS_FNS(X)                                                                                   \
	X(rados_create2) X(rados_conf_read_file) X(rados_conf_set) X(rados_connect) X(rados_shutdown)      \
	X(rados_ioctx_create) X(rados_ioctx_destroy) X(rados_ioctx_set_namespace) X(rados_create_write_op) \
	X(rados_release_write_op) X(rados_write_op_create) X(rados_write_op_operate) X(rados_stat)         \
	X(rados_read) X(rados_write) X(rados_write_full) X(rados_trunc) X(rados_remove)                    \
	X(rados_nobjects_list_open) X(rados_nobjects_list_next) X(rados_nobjects_list_close)               \
	X(rados_aio_create_completion2) X(rados_aio_write) X(rados_aio_wait_for_complete)                 \
	X(rados_aio_get_return_value) X(rados_aio_release) X(rados_lock_exclusive) X(rados_lock_shared)   \
	X(rados_unlock) X(rados_list_lockers) X(rados_write_op_write_full)                      \
	X(rados_create_read_op) X(rados_release_read_op) X(rados_read_op_read) X(rados_read_op_operate)

struct cas_rados_fns {
#define CAS_RADOS_FIELD(f) __typeof__(f) *f;
	CAS_RADOS_FNS(CAS_RADOS_FIELD)
#undef CAS_RADOS_FIELD
};

/* The calls, once cas_rados_connect has succeeded once. */
extern struct cas_rados_fns cas_R;

/* Loads librados (once) and connects to the cluster CEPH_CONF (else
 * /etc/ceph/ceph.conf) names, with an I/O context on spec's pool and
 * namespace. what says in messages what was being opened ("store"). 0, or
 * a negative errno with a message (-ENOTSUP: no librados). A cluster that
 * does not answer fails the connection after client_mount_timeout (30 s
 * unless the configuration says otherwise), not the default 300 s. */
int cas_rados_connect(const char *spec, rados_t *cluster, rados_ioctx_t *io);
void cas_rados_disconnect(rados_t cluster, rados_ioctx_t io);

#endif
#endif
