/*
 * rados.c - librados loaded at run time, and a connection to a store's pool
 * (rados.h).
 */
#ifdef CREST_HAVE_RADOS

#include "cas/rados.h"
#include "util/err.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct cas_rados_fns cas_R;
static pthread_once_t r_once = PTHREAD_ONCE_INIT;
static char r_why[512];   /* why librados could not be loaded; empty: loaded */

static void r_load(void)
{
	void *h = dlopen("librados.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(r_why, sizeof(r_why), "%s", dlerror());
		return;
	}
#define LOAD(f)                                                               \
	if (!r_why[0] && !(*(void **)&cas_R.f = dlsym(h, #f)))                \
		snprintf(r_why, sizeof(r_why), "librados.so.2 lacks %s", #f);
	CAS_RADOS_FNS(LOAD)
#undef LOAD
}

int cas_rados_connect(const char *spec, rados_t *cluster, rados_ioctx_t *io)
{
	pthread_once(&r_once, r_load);
	if (r_why[0])
		return crest_errx(-ENOTSUP, "store rados:%s: cannot load librados (%s): install librados2", spec,
				  r_why);
	char pool[256];
	const char *slash = strchr(spec, '/');
	const size_t pl = slash ? (size_t)(slash - spec) : strlen(spec);
	if (pl == 0 || pl >= sizeof(pool) || (slash && !slash[1]))
		return crest_errx(-EINVAL, "store rados:%s: name a pool, and a namespace after a / if any", spec);
	memcpy(pool, spec, pl);
	pool[pl] = 0;
	*cluster = NULL;
	int rc = cas_R.rados_create2(cluster, "ceph", "client.admin", 0);
	if (rc < 0)
		return crest_errf(rc, "store rados:%s: cannot set up a Ceph client (rados_create2)", spec);
	/* Set before the configuration is read, so that it may say otherwise. */
	cas_R.rados_conf_set(*cluster, "client_mount_timeout", "30");
	if ((rc = cas_R.rados_conf_read_file(*cluster, NULL)) < 0)
		rc = crest_errf(rc, "store rados:%s: cannot read the Ceph configuration ($CEPH_CONF, else "
				"/etc/ceph/ceph.conf)", spec);
	if (rc == 0 && (rc = cas_R.rados_connect(*cluster)) < 0)
		rc = crest_errf(rc, "store rados:%s: cannot connect to the Ceph cluster", spec);
	if (rc == 0 && (rc = cas_R.rados_ioctx_create(*cluster, pool, io)) < 0)
		rc = crest_errf(rc, "store rados:%s: cannot open pool %s", spec, pool);
	if (rc < 0) {
		cas_R.rados_shutdown(*cluster);
		return rc;
	}
	cas_R.rados_ioctx_set_namespace(*io, slash ? slash + 1 : "");
	return 0;
}

void cas_rados_disconnect(rados_t cluster, rados_ioctx_t io)
{
	cas_R.rados_ioctx_destroy(io);
	cas_R.rados_shutdown(cluster);
}

#endif
