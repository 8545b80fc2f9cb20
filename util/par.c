/* par.c - see par.h. */
#include "util/par.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define PAR_THREADS_MAX 16

struct par_job {
	size_t n;
	atomic_size_t next;
	void (*fn)(void *arg, size_t i);
	void *arg;
};

static void *par_main(void *p)
{
	struct par_job *j = p;
	for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;)
		j->fn(j->arg, i);
	return NULL;
}

void par_for(size_t n, unsigned max_threads, void (*fn)(void *arg, size_t i), void *arg)
{
	struct par_job j = { .n = n, .fn = fn, .arg = arg };
	unsigned want = max_threads;
	if (!want) {
		const long nc = sysconf(_SC_NPROCESSORS_ONLN);
		want = nc > 0 ? (unsigned)nc : 1;
	}
	want = want > PAR_THREADS_MAX ? PAR_THREADS_MAX : want;
	if (want > n)
		want = (unsigned)n;
	pthread_t t[PAR_THREADS_MAX];
	unsigned nt = 0;
	while (nt + 1 < want && pthread_create(&t[nt], NULL, par_main, &j) == 0)
		nt++;
	par_main(&j);
	for (unsigned i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
}
