/*
 * rados_test.h - the tests' own librados client (test_objects.c,
 * test_locks.c): what they put beside crest's objects, or clear after
 * themselves, goes through librados directly, not through the code under
 * test. Only with CREST_HAVE_RADOS (link crest_rados).
 */
#ifndef CREST_TESTS_RADOS_TEST_H
#define CREST_TESTS_RADOS_TEST_H

#ifdef CREST_HAVE_RADOS
#include <rados/librados.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A client of the cluster, in the pool and namespace of where
 * ("POOL/NAMESPACE"); false when it cannot be reached. */
static inline bool test_rados(const char *where, rados_t *cl, rados_ioctx_t *io)
{
	char pool[256];
	const char *slash = strchr(where, '/');
	snprintf(pool, sizeof(pool), "%.*s", (int)(slash - where), where);
	if (rados_create2(cl, "ceph", "client.admin", 0) < 0)
		return false;
	if (rados_conf_read_file(*cl, NULL) < 0 || rados_connect(*cl) < 0 || rados_ioctx_create(*cl, pool, io) < 0) {
		rados_shutdown(*cl);
		return false;
	}
	rados_ioctx_set_namespace(*io, slash + 1);
	return true;
}
#endif
#endif
