/*
 * gc_keep.c - cas_gc_keep, gc's retention rules alone, driven by
 * gc_keep.sh against a model of restic's rules written apart from it.
 *
 * stdin: a policy line, "last hourly daily weekly monthly yearly within_ns
 * tagged NTAGS TAG...", then one snapshot a line, newest first: "time_ns
 * head TAG,TAG" ("-" for none). stdout: 1 or 0 a line, whether each stays.
 */
#include "cas/gc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	struct cas_gc_policy p = { 0 };
	unsigned long long within;
	int tagged, ntags;
	static char tagbuf[64][130];
	static const char *tags[64];
	if (scanf("%u %u %u %u %u %u %llu %d %d", &p.keep_last, &p.keep_hourly, &p.keep_daily, &p.keep_weekly,
		  &p.keep_monthly, &p.keep_yearly, &within, &tagged, &ntags) != 9 || ntags < 0 || ntags > 64) {
		fprintf(stderr, "gc_keep: a bad policy line\n");
		return 2;
	}
	for (int i = 0; i < ntags; i++) {
		if (scanf("%129s", tagbuf[i]) != 1)
			return 2;
		tags[i] = tagbuf[i];
	}
	p.keep_within_ns = within;
	p.keep_tagged = tagged != 0;
	p.keep_tags = tags;
	p.nkeep_tags = (size_t)ntags;
	size_t n = 0, cap = 0;
	struct cas_gc_snap *v = NULL;
	char **owned = NULL;
	unsigned long long t;
	int head;
	char tl[4096];
	while (scanf("%llu %d %4095s", &t, &head, tl) == 3) {
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			v = realloc(v, cap * sizeof(*v));
			owned = realloc(owned, cap * sizeof(*owned));
			if (!v || !owned)
				return 3;
		}
		v[n] = (struct cas_gc_snap){ .time_ns = t, .head = head != 0 };
		owned[n] = strdup(tl);
		const char **tv = calloc(64, sizeof(*tv));
		if (!owned[n] || !tv)
			return 3;
		if (strcmp(tl, "-"))
			for (char *s = owned[n], *save = NULL, *tok; (tok = strtok_r(s, ",", &save)) && v[n].ntags < 64;
			     s = NULL)
				tv[v[n].ntags++] = tok;
		v[n].tags = tv;
		n++;
	}
	cas_gc_keep(&p, v, n);
	for (size_t i = 0; i < n; i++) {
		printf("%d\n", v[i].keep ? 1 : 0);
		free((void *)v[i].tags);
		free(owned[i]);
	}
	free(v);
	free(owned);
	return 0;
}
