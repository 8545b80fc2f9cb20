/*
 * jobs.c - the job files of jobs.h: "crest-job 1\n" HEX-ID " " BRANCH "\n".
 */
#include "cas/jobs.h"

#include "cas/history.h"
#include "util/err.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOB_MAGIC "crest-job 1\n"

/* Keys become file names: letters, digits, '-' and '.' only. */
static int key_ok(const char *key)
{
	const size_t n = strlen(key);
	if (n == 0 || n > CAS_JOB_KEY_MAX || key[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= 'A' && key[i] <= 'Z') ||
		      (key[i] >= '0' && key[i] <= '9') || key[i] == '-' || key[i] == '.'))
			return 0;
	return 1;
}

static int jobs_dir(struct cas_store *s, bool create)
{
	const int dfd = open(cas_local_dir(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return -errno;
	if (create && mkdirat(dfd, "jobs", 0700) < 0 && errno != EEXIST) {
		const int e = -errno;
		close(dfd);
		return e;
	}
	const int jfd = openat(dfd, "jobs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	const int e = -errno;
	close(dfd);
	if (jfd < 0)
		return e;
	/* Ours and no one else's to write, like every entry of the store. */
	struct stat st;
	if (fstat(jfd, &st) < 0 || (st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)) {
		close(jfd);
		return -EPERM;
	}
	return jfd;
}

int cas_job_note(struct cas_store *s, const char *key, const uint8_t id[32], const char *branch)
{
	if (!key_ok(key) || cas_branch_check(branch) < 0)
		return crest_errx(-EINVAL, "job key '%s' or branch '%s' cannot be recorded", key, branch);
	const int jfd = jobs_dir(s, true);
	if (jfd < 0)
		return crest_errf(jfd, "store %s: cannot use its jobs directory", cas_dir(s));
	char hex[65], tmp[CAS_JOB_KEY_MAX + 32], body[256];
	hex_encode(id, 32, hex);
	const int len = snprintf(body, sizeof(body), "%s%s %s\n", JOB_MAGIC, hex, branch);
	snprintf(tmp, sizeof(tmp), ".%s.%ld", key, (long)getpid());
	int rc = 0;
	const int fd = openat(jfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		rc = crest_errf(-errno, "store %s: cannot write jobs/%s", cas_dir(s), tmp);
	if (rc == 0 && write(fd, body, (size_t)len) != len)
		rc = crest_errf(-EIO, "store %s: cannot write jobs/%s", cas_dir(s), tmp);
	if (fd >= 0)
		close(fd);
	if (rc == 0 && renameat(jfd, tmp, jfd, key) < 0)
		rc = crest_errf(-errno, "store %s: cannot rename jobs/%s", cas_dir(s), tmp);
	if (rc < 0)
		unlinkat(jfd, tmp, 0);
	close(jfd);
	return rc;
}

int cas_job_find(struct cas_store *s, const char *key, uint8_t id[32], char *branch, size_t cap)
{
	if (!key_ok(key))
		return -ENOENT;
	const int jfd = jobs_dir(s, false);
	if (jfd < 0)
		return -ENOENT;
	const int fd = openat(jfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	close(jfd);
	if (fd < 0)
		return -ENOENT;
	char buf[257];
	const ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= (ssize_t)strlen(JOB_MAGIC) + 66)
		return -ENOENT;
	buf[n] = 0;
	if (strncmp(buf, JOB_MAGIC, strlen(JOB_MAGIC)))
		return -ENOENT;
	const char *p = buf + strlen(JOB_MAGIC);
	char *nl = strchr(p, '\n');
	if (!nl || p[64] != ' ')
		return -ENOENT;
	*nl = 0;
	const char *b = p + 65;
	char hex[65];
	memcpy(hex, p, 64);
	hex[64] = 0;
	if (hex_decode(hex, id, 32) != 32 || cas_branch_check(b) < 0 || strlen(b) >= cap) {
		crest_errset_str("");
		return -ENOENT;
	}
	memcpy(branch, b, strlen(b) + 1);
	return 0;
}
