/*
 * jobjoin.c - the meeting place of jobjoin.h. A rank's file:
 *   "crest-rank 1\n" HEX-ID " " WORLD " " GPU-or-"-" "\n"
 */
#include "cas/jobjoin.h"

#include "cas/jobsnap.h"

#include "util/err.h"
#include "util/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RANK_MAGIC "crest-rank 1\n"

/* STORE/jobs/.ranks/NAME/ATTEMPT.STEP, made if make (each level 0700). */
static int step_dir(struct cas_store *s, const char *name, const char *attempt, uint64_t step, bool make,
		    char *path, size_t cap)
{
	const char *parts[4] = { "jobs", ".ranks", name, NULL };
	char last[CAS_JOBJOIN_ATTEMPT_MAX + 32];
	snprintf(last, sizeof(last), "%s.%" PRIu64, attempt, step);
	parts[3] = last;
	int n = snprintf(path, cap, "%s", cas_local_dir(s));
	for (int i = 0; i < 4; i++) {
		n += snprintf(path + n, cap - (size_t)n, "/%s", parts[i]);
		if ((size_t)n >= cap)
			return crest_errx(-ENAMETOOLONG, "job %s: the path under %s is too long", name, cas_dir(s));
		if (make && mkdir(path, 0700) < 0 && errno != EEXIST)
			return crest_errf(-errno, "job %s: cannot make %s", name, path);
	}
	return 0;
}

static int rank_write(const char *dir, uint32_t rank, uint32_t world, const uint8_t id[32], const char *gpu)
{
	char hex[65], tmp[4200], path[4200], text[256];
	hex_encode(id, 32, hex);
	snprintf(path, sizeof(path), "%s/%u", dir, rank);
	snprintf(tmp, sizeof(tmp), "%s/.%u.tmp", dir, rank);
	const int len = snprintf(text, sizeof(text), RANK_MAGIC "%s %u %s\n", hex, world, gpu && *gpu ? gpu : "-");
	const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot write %s", tmp);
	const ssize_t w = write(fd, text, (size_t)len);
	int rc = w == len ? 0 : crest_errf(w < 0 ? -errno : -EIO, "cannot write %s", tmp);
	if (close(fd) < 0 && rc == 0)
		rc = crest_errf(-errno, "cannot write %s", tmp);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = crest_errf(-errno, "cannot rename %s to %s", tmp, path);
	if (rc < 0)
		unlink(tmp);
	return rc;
}

/* Rank r's file into set, if it is there: 1, 0 (absent or not whole yet), or
 * -EINVAL when it names another world size. */
static int rank_read(const char *dir, uint32_t r, struct cas_jobjoin_set *set, const char *name)
{
	char path[4200], text[256];
	snprintf(path, sizeof(path), "%s/%u", dir, r);
	const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : crest_errf(-errno, "cannot read %s", path);
	const ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	text[n] = 0;
	char hex[65], gpu[CAS_JOBSNAP_GPU_MAX + 1];
	unsigned world;
	if (strncmp(text, RANK_MAGIC, strlen(RANK_MAGIC)) ||
	    sscanf(text + strlen(RANK_MAGIC), "%64s %u %95s", hex, &world, gpu) != 3 || strlen(hex) != 64 ||
	    hex_decode(hex, set->ids[r], 32) < 0)
		return crest_errx(-EINVAL, "job %s: %s is not a rank's file", name, path);
	if (world != set->world)
		return crest_errx(-EINVAL, "job %s: rank %u says the job has %u ranks, this one %u (%s)", name, r,
				  world, set->world, path);
	snprintf(set->gpus[r], sizeof(set->gpus[r]), "%s", strcmp(gpu, "-") ? gpu : "");
	return 1;
}

int cas_jobjoin_arrive(struct cas_store *s, const char *name, const char *attempt, uint64_t step,
		       uint32_t rank, uint32_t world, const uint8_t id[32], const char *gpu,
		       struct cas_jobjoin_set *set)
{
	memset(set, 0, sizeof(*set));
	int rc = cas_jobsnap_name_check(name);
	if (rc < 0)
		return rc;
	if (!cas_jobsnap_name_ok(attempt, CAS_JOBJOIN_ATTEMPT_MAX))
		return crest_errx(-EINVAL, "job %s: attempt '%s' is not 1 to %d of letters, digits, '.', '_', '-' "
				  "(not beginning with '.')", name, attempt ? attempt : "", CAS_JOBJOIN_ATTEMPT_MAX);
	if (world == 0 || rank >= world)
		return crest_errx(-EINVAL, "job %s: rank %u is not in [0, %u)", name, rank, world);
	if ((rc = cas_jobsnap_gpu_check(gpu)) < 0)
		return rc;
	char dir[4096];
	rc = step_dir(s, name, attempt, step, true, dir, sizeof(dir));
	if (rc == 0)
		rc = rank_write(dir, rank, world, id, gpu);
	if (rc < 0)
		return rc;
	set->world = world;
	set->ids = calloc(world, 32);
	set->gpus = calloc(world, sizeof(*set->gpus));
	if (!set->ids || !set->gpus) {
		cas_jobjoin_set_free(set);
		return crest_errf(-ENOMEM, "job %s", name);
	}
	/* Every rank is read, even once one is missing: a file that names
	 * another world size is an error the job should hear of now. */
	uint32_t have = 0;
	for (uint32_t r = 0; r < world; r++) {
		rc = rank_read(dir, r, set, name);
		if (rc < 0) {
			cas_jobjoin_set_free(set);
			return rc;
		}
		have += (uint32_t)rc;
	}
	if (have == world)
		return 1;
	cas_jobjoin_set_free(set);
	return 0;
}

void cas_jobjoin_set_free(struct cas_jobjoin_set *set)
{
	free(set->ids);
	free(set->gpus);
	set->ids = NULL;
	set->gpus = NULL;
}

void cas_jobjoin_done(struct cas_store *s, const char *name, const char *attempt, uint64_t step)
{
	char dir[4096];
	if (cas_jobsnap_name_check(name) < 0 || !cas_jobsnap_name_ok(attempt, CAS_JOBJOIN_ATTEMPT_MAX) ||
	    step_dir(s, name, attempt, step, false, dir, sizeof(dir)) < 0)
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[4400];
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}
