/*
 * meta.c - the meta log: every manifest, extent-list piece and tag a commit
 * makes, written and synced before the index batch that makes it visible.
 * See cas/FORMAT.md for the layout and store.c's design notes for why.
 *
 * One writer session appends to one log, STORE/meta/NNNNNNNN.log, created
 * at its first commit one past the highest on disk (as packs are). A log
 * starts with 16 bytes ("CRESTMET", u32 version, u32 number) and holds
 * records laid out like pack records: a 56-byte header (magic "CRMR", kind,
 * payload length, CRC32C of the payload, the SHA-256 that names it) and the
 * payload. Records are only appended; a failed commit cuts its own records
 * off again (cas_meta_cut) before it reports failure.
 */
#include "cas/cas_int.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cas_meta_path(const struct cas_store *s, uint32_t num, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/meta/%08u.log", s->dir, num);
}

int cas_meta_max_on_disk(const struct cas_store *s, uint32_t *max)
{
	return cas_max_on_disk(s, "meta", "log", max);
}

/* Creates this session's log, its header durable and its name too. */
static int meta_create(struct cas_store *s)
{
	char dir[4096], path[4096];
	snprintf(dir, sizeof(dir), "%s/meta", s->dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "cannot create %s", dir);
	uint32_t max;
	int rc = cas_meta_max_on_disk(s, &max);
	if (rc < 0)
		return rc;
	const uint32_t num = max + 1;
	cas_meta_path(s, num, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot create meta log %s", path);
	uint8_t h[CAS_FILE_HEADER];
	cas_file_header(h, CAS_META_MAGIC, CAS_META_VERSION, num);
	if (pwrite(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) || fdatasync(fd) < 0 || cas_fsync_path(dir) < 0) {
		rc = crest_errf(errno ? -errno : -EIO, "cannot write meta log %s", path);
		close(fd);
		unlink(path);
		return rc;
	}
	s->meta_fd = fd;
	s->meta_num = num;
	s->meta_end = CAS_FILE_HEADER;
	return 0;
}

void cas_meta_rec(struct cas_meta_buf *b, uint8_t kind, const uint8_t sha[32], const void *p, size_t len)
{
	if (b->err)
		return;
	const size_t need = b->len + CAS_REC_HEADER + len;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < need)
			cap *= 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np) {
			b->err = -ENOMEM;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	uint8_t *h = b->p + b->len;
	memset(h, 0, CAS_REC_HEADER);
	memcpy(h, CAS_META_REC_MAGIC, 4);
	h[4] = kind;
	cas_le32_put(h + 8, (uint32_t)len);
	cas_le32_put(h + CAS_REC_CRC, crc32c(p, len));
	memcpy(h + CAS_REC_SHA, sha, 32);
	if (len)
		memcpy(h + CAS_REC_HEADER, p, len);
	b->len = need;
}

int cas_meta_append(struct cas_store *s, const struct cas_meta_buf *b)
{
	char path[4096];
	if (b->err)
		return crest_errf(b->err, "building the meta log records of a commit");
	if (s->meta_fd < 0) {
		int rc = meta_create(s);
		if (rc < 0)
			return rc;
	}
	const uint64_t old_end = s->meta_end;
	cas_meta_path(s, s->meta_num, path, sizeof(path));
	size_t done = 0;
	while (done < b->len) {
		ssize_t r = pwrite(s->meta_fd, b->p + done, b->len - done, (off_t)(s->meta_end + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			const int err = r < 0 ? -errno : -EIO;
			cas_meta_cut(s, old_end);
			return crest_errf(err, "cannot write meta log %s", path);
		}
		done += (size_t)r;
	}
	if (fdatasync(s->meta_fd) < 0) {
		const int err = -errno;
		cas_meta_cut(s, old_end);
		return crest_errf(err, "cannot sync meta log %s", path);
	}
	s->meta_end += b->len;
	return 0;
}

int cas_meta_cut(struct cas_store *s, uint64_t end)
{
	if (s->meta_fd < 0)
		return 0;
	if (ftruncate(s->meta_fd, (off_t)end) < 0 || fdatasync(s->meta_fd) < 0)
		return -errno;
	s->meta_end = end;
	return 0;
}

void cas_meta_close(struct cas_store *s)
{
	if (s->meta_fd >= 0)
		close(s->meta_fd);
	s->meta_fd = -1;
}

int cas_meta_walk(const struct cas_store *s, uint32_t num, uint64_t from,
		  int (*cb)(const struct cas_meta_item *it, void *arg), void *arg, uint64_t *end)
{
	char path[4096];
	cas_meta_path(s, num, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "cannot open meta log %s", path);
	struct stat st;
	uint8_t *buf = NULL, h[CAS_FILE_HEADER];
	int rc = fstat(fd, &st) < 0 ? crest_errf(-errno, "cannot stat %s", path) : 0;
	const uint64_t size = rc == 0 ? (uint64_t)st.st_size : 0;
	uint64_t off = from < CAS_FILE_HEADER ? CAS_FILE_HEADER : from;
	/* Only what lies past from is read: at a writer's open that is
	 * usually nothing. buf holds [off, size). */
	if (rc == 0 && size >= CAS_FILE_HEADER && pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h))
		rc = crest_errf(-EIO, "cannot read %s", path);
	if (rc == 0 && size > off) {
		buf = malloc(size - off);
		if (!buf)
			rc = crest_errf(-ENOMEM, "reading %s", path);
		size_t got = 0;
		while (rc == 0 && got < size - off) {
			ssize_t r = pread(fd, buf + got, size - off - got, (off_t)(off + got));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				rc = crest_errf(r < 0 ? -errno : -EIO, "cannot read %s", path);
			else
				got += (size_t)r;
		}
	}
	close(fd);
	const uint64_t base = off;
	if (rc == 0 && size >= CAS_FILE_HEADER) {
		uint32_t version, n;
		if (cas_file_header_check(h, CAS_META_MAGIC, &version, &n) < 0 || n != num)
			rc = crest_errx(-EBADMSG, "%s is not a crest meta log (bad header)", path);
		else if (version > CAS_META_VERSION)
			rc = crest_errx(-EPROTONOSUPPORT, "%s has version %u; this crest reads up to %u",
					path, version, CAS_META_VERSION);
	}
	/* Records until the first one that does not check out: a torn tail
	 * (a writer killed mid-append) ends the walk, and so does damage,
	 * which *end then points at. */
	while (rc == 0 && off + CAS_REC_HEADER <= size) {
		const uint8_t *r = buf + (off - base);
		const uint32_t len = cas_le32_get(r + 8);
		if (memcmp(r, CAS_META_REC_MAGIC, 4) || len > size - off - CAS_REC_HEADER ||
		    crc32c(r + CAS_REC_HEADER, len) != cas_le32_get(r + CAS_REC_CRC))
			break;
		const struct cas_meta_item it = { .kind = r[4], .sha = r + CAS_REC_SHA,
						  .p = r + CAS_REC_HEADER, .len = len,
						  .log = num, .off = off };
		rc = cb(&it, arg);
		off += CAS_REC_HEADER + len;
	}
	free(buf);
	if (end)
		*end = off;
	return rc;
}
