/* par.c - see par.h. */
#include "util/par.h"
#include "util/err.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void par_fail(struct par *p, int err)
{
	pthread_mutex_lock(&p->lock);
	if (!p->err) {
		p->err = err;
		crest_errcpy(p->msg, sizeof(p->msg));
	}
	pthread_mutex_unlock(&p->lock);
	atomic_store(&p->stop, true);
}

static void *par_main(void *arg)
{
	struct par *p = arg;
	const size_t batch = p->batch ? p->batch : 1;
	void *tls = NULL;
	int rc = p->tls_new ? p->tls_new(p, &tls) : 0;
	if (rc < 0)
		par_fail(p, rc);
	while (rc == 0 && !atomic_load(&p->stop)) {
		size_t i = atomic_fetch_add(&p->next, batch);
		if (i >= p->n)
			break;
		const size_t end = i + batch < p->n ? i + batch : p->n;
		for (; i < end && !atomic_load(&p->stop); i++) {
			rc = p->fn(p, tls, i);
			if (rc < 0) {
				par_fail(p, rc);
				break;
			}
		}
	}
	if (p->tls_free)
		p->tls_free(tls);
	return NULL;
}

static void *par_thread(void *arg)
{
	struct par *p = arg;
	par_main(p);
	pthread_mutex_lock(&p->lock);
	p->running--;
	pthread_cond_signal(&p->done);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

unsigned par_cores(void)
{
	const long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

int par_run(struct par *p, unsigned threads, struct progress *prog, uint64_t base)
{
	if (!threads)
		threads = par_cores();
	const size_t batch = p->batch ? p->batch : 1;
	if (threads > (p->n + batch - 1) / batch)
		threads = (unsigned)((p->n + batch - 1) / batch);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->done, NULL);
	pthread_t *t = threads > 1 ? calloc(threads, sizeof(*t)) : NULL;
	unsigned started = 0;
	pthread_mutex_lock(&p->lock);
	for (; t && started < threads; started++)
		if (pthread_create(&t[started], NULL, par_thread, p) != 0)
			break;
	p->running = started;
	pthread_mutex_unlock(&p->lock);
	if (started == 0) {
		par_main(p);  /* one batch, or no threads to be had: do it here */
	} else {
		pthread_mutex_lock(&p->lock);
		while (p->running > 0) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&p->done, &p->lock, &ts);
			if (prog)
				progress_update(prog, base + atomic_load(&p->bytes));
		}
		pthread_mutex_unlock(&p->lock);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	free(t);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	if (p->err)
		crest_errset_str(p->msg);
	return p->err;
}
