/*
 * pending.c - the table of chunks written but not committed (see
 * engine_int.h): NSTRIPES hash tables of sha -> seq, each under its stripe
 * lock, so that a chunk queued for the writer is stored once even before
 * the index has it.
 *
 * Owns: e->stripes (their nodes and buckets; engine.c inits the locks and
 * frees what is left at close). Promises: a call takes at most one stripe
 * lock at a time (eng_pending_find and eng_pending_insert run under the
 * caller's), and a remove with an owner takes only that owner's PENDING
 * node. Calls nothing else of the engine.
 */
#include "engine/engine_int.h"
#include "util/par.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t stripe_of(const uint8_t sha[32])
{
	return (size_t)(sha[0] | sha[1] << 8) % NSTRIPES;
}

struct stripe *eng_pending_stripe(struct engine *e, const uint8_t sha[32])
{
	return &e->stripes[stripe_of(sha)];
}

static size_t bucket_of(const struct stripe *s, const uint8_t sha[32])
{
	uint64_t h;
	memcpy(&h, sha + 8, 8);
	return (size_t)(h & (s->nb - 1));
}

/* Under the stripe's lock. Returns the node or NULL. */
struct node *eng_pending_find(struct stripe *s, const uint8_t sha[32])
{
	if (!s->nb)
		return NULL;
	for (struct node *n = s->b[bucket_of(s, sha)]; n; n = n->next)
		if (!memcmp(n->sha, sha, 32))
			return n;
	return NULL;
}

int eng_pending_insert(struct stripe *s, const uint8_t sha[32], uint64_t seq, const struct batch *owner,
		       struct node **out)
{
	if (s->n >= s->nb) {
		size_t nb = s->nb ? s->nb * 2 : 1024;
		struct node **b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (size_t i = 0; i < s->nb; i++) {
			struct node *n = s->b[i];
			while (n) {
				struct node *next = n->next;
				uint64_t h;
				memcpy(&h, n->sha + 8, 8);
				size_t k = (size_t)(h & (nb - 1));
				n->next = b[k];
				b[k] = n;
				n = next;
			}
		}
		free(s->b);
		s->b = b;
		s->nb = nb;
	}
	struct node *n = malloc(sizeof(*n));
	if (!n)
		return -ENOMEM;
	memcpy(n->sha, sha, 32);
	atomic_init(&n->seq, seq);
	n->owner = owner;
	size_t k = bucket_of(s, sha);
	n->next = s->b[k];
	s->b[k] = n;
	s->n++;
	*out = n;
	return 0;
}

/* Removes sha's node from s, under its lock: any (owner NULL: its commit
 * made it durable), or only the PENDING node owner entered (its batch gave
 * it up). */
static void stripe_remove(struct stripe *s, const uint8_t sha[32], const struct batch *owner)
{
	if (!s->nb)
		return;
	for (struct node **pp = &s->b[bucket_of(s, sha)]; *pp; pp = &(*pp)->next) {
		struct node *n = *pp;
		if (!memcmp(n->sha, sha, 32)) {
			if (!owner || (n->owner == owner && atomic_load(&n->seq) == PENDING)) {
				*pp = n->next;
				free(n);
				s->n--;
			}
			return;
		}
	}
}

void eng_pending_remove(struct engine *e, const uint8_t sha[32], const struct batch *owner)
{
	struct stripe *s = eng_pending_stripe(e, sha);
	pthread_mutex_lock(&s->lock);
	stripe_remove(s, sha, owner);
	pthread_mutex_unlock(&s->lock);
}

/* eng_pending_forget: the ids of one stripe are taken by one thread, under
 * that stripe's lock once. */
struct forget {
	struct engine *e;
	const struct cas_index_entry *ie;
	const uint32_t *idx;     /* indexes into ie, grouped by stripe */
	size_t start[NSTRIPES + 1];
};

static int forget_stripe(struct par *p, void *tls, size_t i)
{
	(void)tls;
	const struct forget *f = p->arg;
	struct stripe *s = &f->e->stripes[i];
	pthread_mutex_lock(&s->lock);
	for (size_t x = f->start[i]; x < f->start[i + 1]; x++)
		stripe_remove(s, f->ie[f->idx[x]].sha, NULL);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

void eng_pending_forget(struct engine *e, const struct cas_index_entry *ie, size_t n)
{
	/* One by one, 2 M ids of a first 8 GiB checkpoint took 0.56 s on the
	 * 16-core host (a cache miss and a free each), on the committer's
	 * thread, which the next commit waits for. Small commits, or no
	 * memory for the grouping: one by one. */
	atomic_fetch_add(&e->forget_gen, 1);
	uint32_t *idx = n >= 65536 && n < UINT32_MAX ? malloc(n * sizeof(*idx)) : NULL;
	if (!idx) {
		for (size_t i = 0; i < n; i++)
			eng_pending_remove(e, ie[i].sha, NULL);
		return;
	}
	struct forget f = { .e = e, .ie = ie, .idx = idx };
	for (size_t i = 0; i < n; i++)
		f.start[stripe_of(ie[i].sha) + 1]++;
	for (size_t b = 0; b < NSTRIPES; b++)
		f.start[b + 1] += f.start[b];
	size_t at[NSTRIPES];
	memcpy(at, f.start, sizeof(at));
	for (size_t i = 0; i < n; i++)
		idx[at[stripe_of(ie[i].sha)]++] = (uint32_t)i;
	struct par p = { .n = NSTRIPES, .fn = forget_stripe, .arg = &f };
	par_run(&p, 0, NULL, 0);   /* no item fails */
	free(idx);
}

/* Forgets every node (engine_recover: none is PENDING then). */
void eng_pending_clear(struct engine *e)
{
	atomic_fetch_add(&e->forget_gen, 1);
	for (int i = 0; i < NSTRIPES; i++) {
		struct stripe *st = &e->stripes[i];
		pthread_mutex_lock(&st->lock);
		for (size_t b = 0; b < st->nb; b++) {
			for (struct node *n = st->b[b], *next; n; n = next) {
				next = n->next;
				free(n);
			}
			st->b[b] = NULL;
		}
		st->n = 0;
		pthread_mutex_unlock(&st->lock);
	}
}
