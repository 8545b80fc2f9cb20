/* gpumap.c - the GPUs a job saw, and completing a restore's map; see gpumap.h. */
#include "gpu/gpumap.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void gpumap_uuid_str(const CUuuid *u, char buf[41])
{
	const unsigned char *b = (const unsigned char *)u->bytes;
	snprintf(buf, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int gpumap_host(const struct cudrv *d, struct gpu_info **out, size_t *n)
{
	int count = 0;
	*out = NULL;
	*n = 0;
	int rc = cudrv_check(d, d->DeviceGetCount(&count), "cuDeviceGetCount");
	if (rc < 0)
		return rc;
	struct gpu_info *v = calloc(count > 0 ? (size_t)count : 1, sizeof(*v));
	if (!v)
		return crest_errf(-ENOMEM, "listing GPUs");
	for (int i = 0; rc == 0 && i < count; i++) {
		CUdevice dev;
		rc = cudrv_check(d, d->DeviceGet(&dev, i), "cuDeviceGet");
		if (rc == 0)
			rc = cudrv_check(d, d->DeviceGetUuid(&v[i].uuid, dev), "cuDeviceGetUuid");
		if (rc == 0)
			rc = cudrv_check(d, d->DeviceGetName(v[i].name, (int)sizeof(v[i].name), dev), "cuDeviceGetName");
	}
	if (rc < 0) {
		free(v);
		return rc;
	}
	*out = v;
	*n = (size_t)count;
	return 0;
}

/* CUDA_VISIBLE_DEVICES of pid, or NULL when it has none (caller frees). */
static char *visible_devices(pid_t pid)
{
	char path[64], buf[65536];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return NULL;
	buf[len] = 0;
	static const char key[] = "CUDA_VISIBLE_DEVICES=";
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1)
		if (!strncmp(buf + i, key, sizeof(key) - 1))
			return strdup(buf + i + sizeof(key) - 1);
	return NULL;
}

/* The host GPU that s names (an index, or a UUID or its prefix as CUDA
 * accepts it), or -1. */
static int host_find(const char *s, const struct gpu_info *host, size_t nhost)
{
	char *end;
	const long idx = strtol(s, &end, 10);
	if (*s && !*end)
		return idx >= 0 && (size_t)idx < nhost ? (int)idx : -1;
	const char *want = !strncmp(s, "GPU-", 4) ? s : NULL;
	if (!want)
		return -1;
	for (size_t i = 0; i < nhost; i++) {
		char u[41];
		gpumap_uuid_str(&host[i].uuid, u);
		if (!strncasecmp(u, want, strlen(want)))
			return (int)i;
	}
	return -1;
}

int gpumap_seen(pid_t pid, const struct gpu_info *host, size_t nhost, struct gpu_info **out, size_t *n)
{
	char *vis = visible_devices(pid);
	struct gpu_info *v = calloc(nhost ? nhost : 1, sizeof(*v));
	*out = NULL;
	*n = 0;
	if (!v) {
		free(vis);
		return crest_errf(-ENOMEM, "listing GPUs");
	}
	size_t k = 0;
	if (!vis) {
		memcpy(v, host, nhost * sizeof(*v));
		k = nhost;
	} else {
		/* CUDA stops at the first entry it cannot use: so does this. */
		char *save = NULL;
		for (char *t = strtok_r(vis, ",", &save); t && k < nhost; t = strtok_r(NULL, ",", &save)) {
			const int i = host_find(t, host, nhost);
			if (i < 0)
				break;
			v[k++] = host[i];
		}
	}
	free(vis);
	*out = v;
	*n = k;
	return 0;
}

int gpumap_format(const struct gpu_info *g, size_t n, char **out)
{
	size_t cap = n * (41 + 1 + sizeof(g->name) + 24) + 1, len = 0;
	char *s = malloc(cap);
	if (!s)
		return crest_errf(-ENOMEM, "recording GPUs");
	s[0] = 0;
	for (size_t i = 0; i < n; i++) {
		char u[41];
		gpumap_uuid_str(&g[i].uuid, u);
		len += (size_t)snprintf(s + len, cap - len, "%s%s=%s", i ? ";" : "", u, g[i].name);
		if (g[i].mib)
			len += (size_t)snprintf(s + len, cap - len, "@%llu", (unsigned long long)g[i].mib);
	}
	*out = s;
	return 0;
}

int gpumap_parse(const char *s, struct gpu_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ';';
	struct gpu_info *v = calloc(cap, sizeof(*v));
	char *dup = strdup(s);
	int rc = v && dup ? 0 : crest_errf(-ENOMEM, "reading a snapshot's GPUs");
	char *save = NULL;
	size_t k = 0;
	for (char *t = rc == 0 ? strtok_r(dup, ";", &save) : NULL; t && rc == 0; t = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(t, '=');
		if (!eq || k == cap) {
			rc = crest_errx(-EINVAL, "the snapshot's list of GPUs is damaged: '%s'", s);
			break;
		}
		*eq = 0;
		rc = gpuckpt_parse_uuid(t, &v[k].uuid);
		if (rc < 0)
			crest_errctx(rc, "the snapshot's list of GPUs is damaged");
		char *at = strrchr(eq + 1, '@');   /* GPU names hold no '@' */
		if (at) {
			*at = 0;
			v[k].mib = strtoull(at + 1, NULL, 10);
		}
		snprintf(v[k].name, sizeof(v[k].name), "%s", eq + 1);
		k++;
	}
	free(dup);
	if (rc < 0) {
		free(v);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}


static int find(const struct gpu_info *g, size_t n, const CUuuid *u)
{
	for (size_t i = 0; i < n; i++)
		if (!memcmp(g[i].uuid.bytes, u->bytes, sizeof(u->bytes)))
			return (int)i;
	return -1;
}

static bool fits(const struct gpu_info *seen, const struct gpu_info *host)
{
	return !seen->mib || !host->mib || host->mib >= seen->mib;
}

/* Runs nvidia-smi with query (csv, no header, no units), calling line for
 * each line of its output. Nothing when it cannot run. */
static void smi(const char *query, void (*line)(char *l, void *arg), void *arg)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "nvidia-smi %s --format=csv,noheader,nounits 2>/dev/null", query);
	FILE *f = popen(cmd, "re");
	if (!f)
		return;
	char buf[512];
	while (fgets(buf, sizeof(buf), f))
		line(buf, arg);
	pclose(f);
}

struct used_ctx {
	const pid_t *pids;
	size_t npids;
	struct gpu_info *g;
	size_t n;
};

/* "pid, GPU-uuid, MiB" of a running compute process. */
static void used_line(char *l, void *arg)
{
	struct used_ctx *c = arg;
	char uuid[64];
	unsigned long long mib;
	int pid;
	CUuuid u;
	if (sscanf(l, "%d, %63[^,], %llu", &pid, uuid, &mib) != 3 || gpuckpt_parse_uuid(uuid, &u) < 0)
		return;
	bool ours = false;
	for (size_t i = 0; i < c->npids; i++)
		ours |= c->pids[i] == pid;
	const int k = ours ? find(c->g, c->n, &u) : -1;
	if (k >= 0)
		c->g[k].mib += mib;
}

void gpumap_used(const pid_t *pids, size_t npids, struct gpu_info *seen, size_t nseen)
{
	struct used_ctx c = { pids, npids, seen, nseen };
	smi("--query-compute-apps=pid,gpu_uuid,used_memory", used_line, &c);
}

/* "GPU-uuid, MiB" free. */
static void free_line(char *l, void *arg)
{
	struct used_ctx *c = arg;
	char uuid[64];
	unsigned long long mib;
	CUuuid u;
	if (sscanf(l, "%63[^,], %llu", uuid, &mib) != 2 || gpuckpt_parse_uuid(uuid, &u) < 0)
		return;
	const int k = find(c->g, c->n, &u);
	if (k >= 0)
		c->g[k].mib = mib ? mib : 1;   /* 0 would read as "not known" */
}

void gpumap_free_mem(struct gpu_info *host, size_t nhost)
{
	struct used_ctx c = { NULL, 0, host, nhost };
	smi("--query-gpu=uuid,memory.free", free_line, &c);
}

int gpumap_complete(const struct gpu_info *seen, size_t nseen, const struct gpu_info *host, size_t nhost,
		    const struct gpuckpt_map *want, size_t nwant, const char *gpu,
		    struct gpuckpt_map **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	/* to[i]: the host GPU seen[i] goes to, or -1 while open. */
	int *to = malloc((nseen ? nseen : 1) * sizeof(*to));
	bool *taken = calloc(nhost ? nhost : 1, sizeof(*taken));
	int rc = to && taken ? 0 : crest_errf(-ENOMEM, "mapping GPUs");
	for (size_t i = 0; i < nseen && to; i++)
		to[i] = -1;
	char a[41], b[41];
	for (size_t w = 0; rc == 0 && w < nwant + (gpu ? 1 : 0); w++) {
		int s, h;
		if (w < nwant) {
			s = find(seen, nseen, &want[w].from);
			h = find(host, nhost, &want[w].to);
			gpumap_uuid_str(&want[w].from, a);
			gpumap_uuid_str(&want[w].to, b);
		} else {
			s = nseen ? 0 : -1;
			h = host_find(gpu, host, nhost);
			snprintf(a, sizeof(a), "%s", nseen ? "its first GPU" : "?");
			snprintf(b, sizeof(b), "%.40s", gpu);
		}
		if (s < 0)
			rc = crest_errx(-EINVAL, "GPU %s: the job did not see it at its checkpoint", a);
		else if (h < 0)
			rc = crest_errx(-EINVAL, "GPU %s is not on this machine (nvidia-smi -L lists them)", b);
		else if (strcmp(seen[s].name, host[h].name))
			rc = crest_errx(-EINVAL, "cannot move %s (%s) to %s (%s): the driver restores onto the same "
					"chip only", a, seen[s].name, b, host[h].name);
		else if (seen[s].mib && host[h].mib && host[h].mib < seen[s].mib)
			rc = crest_errx(-EINVAL, "cannot move %s to %s: the job used %llu MiB there and %s has %llu "
					"MiB free", a, b, (unsigned long long)seen[s].mib, b,
					(unsigned long long)host[h].mib);
		else if (to[s] >= 0 && to[s] != h)
			rc = crest_errx(-EINVAL, "GPU %s is mapped twice", a);
		else if (taken[h] && to[s] != h)
			rc = crest_errx(-EINVAL, "two GPUs of the job are mapped onto %s", b);
		if (rc == 0) {
			to[s] = h;
			taken[h] = true;
		}
	}
	/* The rest: each to itself where it is here and free, then to any
	 * free GPU of its chip. */
	for (size_t i = 0; rc == 0 && i < nseen; i++) {
		const int h = find(host, nhost, &seen[i].uuid);
		if (to[i] < 0 && h >= 0 && !taken[h] && fits(&seen[i], &host[h])) {
			to[i] = h;
			taken[h] = true;
		}
	}
	for (size_t i = 0; rc == 0 && i < nseen; i++) {
		for (size_t h = 0; to[i] < 0 && h < nhost; h++)
			if (!taken[h] && !strcmp(host[h].name, seen[i].name) && fits(&seen[i], &host[h])) {
				to[i] = (int)h;
				taken[h] = true;
			}
		if (to[i] < 0) {
			gpumap_uuid_str(&seen[i].uuid, a);
			rc = crest_errx(-EINVAL, "no GPU here is free for the job's %s (%s%s): every GPU it saw "
					"needs one of its chip with that memory free (give --gpu-map for it)", a,
					seen[i].name, seen[i].mib ? ", its memory" : "");
		}
	}
	struct gpuckpt_map *m = NULL;
	size_t k = 0, moved = 0;
	if (rc == 0 && nseen) {
		m = calloc(nseen, sizeof(*m));
		if (!m)
			rc = crest_errf(-ENOMEM, "mapping GPUs");
		for (size_t i = 0; m && i < nseen; i++) {
			m[k].from = seen[i].uuid;
			m[k].to = host[to[i]].uuid;
			moved += memcmp(m[k].from.bytes, m[k].to.bytes, sizeof(m[k].to.bytes)) != 0;
			k++;
		}
	}
	free(to);
	free(taken);
	if (rc < 0 || !moved) {
		free(m);
		return rc;
	}
	*out = m;
	*n = k;
	return 0;
}

struct held_ctx {
	pid_t pid;
	CUuuid seen[64];
	size_t n;
};

/* "pid, GPU-uuid, ..." of a running compute process: one context. */
static void held_line(char *l, void *arg)
{
	struct held_ctx *c = arg;
	char uuid[64];
	int pid;
	CUuuid u;
	if (sscanf(l, "%d, %63[^,\n]", &pid, uuid) != 2 || pid != c->pid || gpuckpt_parse_uuid(uuid, &u) < 0)
		return;
	for (size_t i = 0; i < c->n; i++)
		if (!memcmp(c->seen[i].bytes, u.bytes, sizeof(u.bytes)))
			return;
	if (c->n < sizeof(c->seen) / sizeof(c->seen[0]))
		c->seen[c->n++] = u;
}

/* The distinct /dev/nvidiaN that pid maps, as "/dev/nvidia0, ..." into
 * what; how many. */
static size_t held_maps(pid_t pid, char *what, size_t cap)
{
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	bool have[256] = { false };
	size_t n = 0, len = 0;
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "/dev/nvidia");
		char *end;
		if (!p || p[11] < '0' || p[11] > '9')
			continue;
		const unsigned long k = strtoul(p + 11, &end, 10);
		if (k >= 256 || (*end != '\n' && *end != ' ' && *end) || have[k])
			continue;
		have[k] = true;
		n++;
		if (cap > len)
			len += (size_t)snprintf(what + len, cap - len, "%s/dev/nvidia%lu", len ? ", " : "", k);
	}
	fclose(f);
	return n;
}

size_t gpumap_held(pid_t pid, const struct gpu_info *host, size_t nhost, char *what, size_t cap)
{
	struct held_ctx *c = calloc(1, sizeof(*c));
	if (cap)
		what[0] = 0;
	if (!c)
		return 0;   /* not told: not refused */
	c->pid = pid;
	smi("--query-compute-apps=pid,gpu_uuid", held_line, c);
	size_t n = c->n, len = 0;
	for (size_t i = 0; i < n && cap > len; i++) {
		char u[41];
		gpumap_uuid_str(&c->seen[i], u);
		const int k = find(host, nhost, &c->seen[i]);
		if (k >= 0)
			len += (size_t)snprintf(what + len, cap - len, "%sGPU %d (%s)", i ? ", " : "", k, u);
		else
			len += (size_t)snprintf(what + len, cap - len, "%s%s", i ? ", " : "", u);
	}
	free(c);
	return n ? n : held_maps(pid, what, cap);
}
