/*
 * push.c - libcrest's background push; see push.h.
 */
#include "lib/push.h"

#include "cas/cas.h"
#include "cas/copy.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/sha256.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lib_pusher {
	char *src, *dst;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t (*q)[32];            /* queued ids, q[0..n) */
	size_t n, cap;
	bool quit;
	int first;                   /* the first failure, with msg */
	char msg[1024];
};

/* One snapshot into dst, with the tags it has free there. */
static int push_one(const struct lib_pusher *p, const uint8_t id[32])
{
	struct cas_store *s = NULL, *d = NULL;
	int rc = cas_open(p->src, CAS_READ, &s);
	if (rc == 0)
		rc = cas_open(p->dst, CAS_WRITE, &d);
	struct cas_copy_stats st;
	size_t given = 0;
	if (rc == 0)
		rc = cas_snapshot_copy(s, d, id, NULL, NULL, &st);
	if (rc == 0)
		rc = cas_snapshot_copy_tags(s, d, id, &given, NULL, NULL);
	if (d)
		cas_close(d);
	if (s)
		cas_close(s);
	return rc;
}

static void *pusher_main(void *arg)
{
	struct lib_pusher *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->n && !p->quit)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->n)
			break;
		uint8_t id[32];
		memcpy(id, p->q[0], 32);
		memmove(p->q, p->q + 1, (p->n - 1) * sizeof(*p->q));
		p->n--;
		pthread_mutex_unlock(&p->mu);
		const int rc = push_one(p, id);
		char hex[65];
		hex_encode(id, 32, hex);
		if (rc < 0)
			fprintf(stderr, "crest: pushing snapshot %.12s to %s failed: %s\n", hex, p->dst, crest_errmsg());
		pthread_mutex_lock(&p->mu);
		if (rc < 0 && !p->first) {
			p->first = rc;
			snprintf(p->msg, sizeof(p->msg), "pushing snapshot %.12s to %s: %s", hex, p->dst,
				 crest_errmsg());
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int lib_pusher_open(const char *src, const char *dst, struct lib_pusher **out)
{
	*out = NULL;
	if (!dst || !*dst)
		return crest_errx(-EINVAL, "push_to is empty");
	if (fs_same_path(src, dst))
		return crest_errx(-EINVAL, "push_to %s is the store itself", dst);
	struct cas_store *s;
	int rc = cas_open(dst, CAS_READ, &s);   /* it must be a store already, as for crest push */
	if (rc < 0)
		return crest_errctx(-EINVAL, "push_to %s", dst);
	cas_close(s);
	struct lib_pusher *p = calloc(1, sizeof(*p));
	if (!p || !(p->src = strdup(src)) || !(p->dst = strdup(dst))) {
		if (p) {
			free(p->src);
			free(p);
		}
		return crest_errf(-ENOMEM, "push_to %s", dst);
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	rc = -pthread_create(&p->thread, NULL, pusher_main, p);
	if (rc < 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p->src);
		free(p->dst);
		free(p);
		return crest_errx(rc, "starting the thread that pushes to %s: %s", dst, strerror(-rc));
	}
	*out = p;
	return 0;
}

void lib_pusher_add(struct lib_pusher *p, const uint8_t id[32])
{
	pthread_mutex_lock(&p->mu);
	if (p->n == p->cap) {
		const size_t cap = p->cap ? p->cap * 2 : 8;
		uint8_t (*q)[32] = realloc(p->q, cap * sizeof(*q));
		if (!q) {
			if (!p->first) {
				p->first = -ENOMEM;
				snprintf(p->msg, sizeof(p->msg), "queueing a push to %s: out of memory", p->dst);
			}
			pthread_mutex_unlock(&p->mu);
			return;
		}
		p->q = q;
		p->cap = cap;
	}
	memcpy(p->q[p->n++], id, 32);
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

int lib_pusher_close(struct lib_pusher *p)
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	const int rc = p->first;
	if (rc < 0)
		crest_errset_str(p->msg);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->q);
	free(p->src);
	free(p->dst);
	free(p);
	return rc;
}
