/* sock.c - the internet sockets of a process tree, from /proc; see sock.h. */
#include "os/sock.h"
#include "util/err.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One socket a process of the tree holds. */
struct held {
	uint64_t ino;
	pid_t pid;
	uint64_t netns;
};

/* One line of a /proc/PID/net table: addresses as the kernel prints them
 * ("0100007F:1F90"), compared as text to find a connection's peer. */
struct entry {
	char local[48], remote[48];
	int state;
	uint64_t ino;
	bool v6, tcp;
};

struct table {
	struct entry *v;
	size_t n;
};

static int held_cmp(const void *a, const void *b)
{
	const uint64_t x = ((const struct held *)a)->ino, y = ((const struct held *)b)->ino;
	return x < y ? -1 : x > y;
}

static const struct held *held_find(const struct held *h, size_t n, uint64_t ino)
{
	const struct held key = { .ino = ino };
	return bsearch(&key, h, n, sizeof(*h), held_cmp);
}

/* The socket inodes of pid's descriptors, appended to *h. */
static int held_add(pid_t pid, struct held **h, size_t *n, size_t *cap)
{
	char dpath[64];
	snprintf(dpath, sizeof(dpath), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dpath);
	if (!d)
		return 0;   /* gone meanwhile: CRIU will say so */
	const uint64_t netns = proc_ns_ino(pid, "net");
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char lpath[PATH_MAX], target[64];
		snprintf(lpath, sizeof(lpath), "%s/%s", dpath, e->d_name);
		const ssize_t len = readlink(lpath, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		unsigned long long ino;
		if (sscanf(target, "socket:[%llu]", &ino) != 1)
			continue;
		if (*n == *cap) {
			struct held *nh = realloc(*h, (*cap = *cap ? 2 * *cap : 64) * sizeof(*nh));
			if (!nh) {
				rc = crest_errf(-ENOMEM, "listing the sockets of pid %d", (int)pid);
				break;
			}
			*h = nh;
		}
		(*h)[(*n)++] = (struct held){ .ino = ino, .pid = pid, .netns = netns };
	}
	closedir(d);
	return rc;
}

/* Appends the entries of /proc/PID/net/NAME (tcp, tcp6, udp, udp6) to t. */
static int table_read(pid_t pid, const char *name, struct table *t, size_t *cap)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, name);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;   /* no IPv6 in this kernel, or pid gone */
	int rc = 0;
	bool first = true;
	while (fgets(line, sizeof(line), f)) {
		if (first) {   /* the header */
			first = false;
			continue;
		}
		struct entry en = { .v6 = strchr(name, '6') != NULL, .tcp = name[0] == 't' };
		unsigned st;
		unsigned long long ino;
		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*s %47s %47s %x %*s %*s %*s %*u %*d %llu", en.local, en.remote, &st, &ino) != 4)
			continue;
		en.state = (int)st;
		en.ino = ino;
		if (t->n == *cap) {
			struct entry *nv = realloc(t->v, (*cap = *cap ? 2 * *cap : 256) * sizeof(*nv));
			if (!nv) {
				rc = crest_errf(-ENOMEM, "reading %s", path);
				break;
			}
			t->v = nv;
		}
		t->v[t->n++] = en;
	}
	fclose(f);
	return rc;
}

/* "0100007F:1F90" (tcp) or 32 hex digits and a port (tcp6), as the kernel
 * prints them (each 32-bit word in host order), to "127.0.0.1:8080" or
 * "[::1]:8080". */
static void addr_format(const char *hex, bool v6, char *out, size_t cap)
{
	const char *colon = strchr(hex, ':');
	unsigned port = colon ? (unsigned)strtoul(colon + 1, NULL, 16) : 0;
	uint32_t w[4] = { 0 };
	const int nw = v6 ? 4 : 1;
	for (int i = 0; i < nw; i++) {
		char part[9];
		memcpy(part, hex + 8 * i, 8);
		part[8] = 0;
		w[i] = (uint32_t)strtoul(part, NULL, 16);
	}
	char a[INET6_ADDRSTRLEN] = "?";
	if (!colon || colon - hex != 8 * nw || !inet_ntop(v6 ? AF_INET6 : AF_INET, w, a, sizeof(a)))
		snprintf(a, sizeof(a), "?");
	snprintf(out, cap, v6 ? "[%s]:%u" : "%s:%u", a, port);
}

/* The port of a kernel-printed address. */
static const char *port_of(const char *hex)
{
	const char *c = strchr(hex, ':');
	return c ? c + 1 : "";
}

/* Whether the peer of connection c, in its namespace's table t, is held by
 * the tree. A connection the server side has not accepted yet has no inode
 * there: it sits in the queue of a listening socket, which is the tree's
 * if a listener of the tree has its port. */
static bool peer_inside(const struct entry *c, const struct table *t, const struct held *h, size_t nh,
			uint64_t netns)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct entry *p = &t->v[i];
		if (!p->tcp || p->v6 != c->v6 || strcmp(p->local, c->remote) || strcmp(p->remote, c->local))
			continue;
		if (p->ino) {
			const struct held *x = held_find(h, nh, p->ino);
			return x && x->netns == netns;
		}
		for (size_t k = 0; k < t->n; k++) {
			const struct entry *l = &t->v[k];
			if (l->tcp && l->state == SOCK_TCP_LISTEN && l->ino && !strcmp(port_of(l->local), port_of(p->local)) &&
			    held_find(h, nh, l->ino))
				return true;
		}
		return false;
	}
	return false;
}

/* One unix socket of the caller's namespace, as sock_diag shows it. */
struct usock {
	uint64_t ino, peer;
	char name[112];
};

/* Every unix socket of the caller's network namespace, with its peer and
 * its name; -errno when sock_diag cannot be asked. */
static int unix_dump(struct usock **v, size_t *n)
{
	*v = NULL;
	*n = 0;
	const int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	struct {
		struct nlmsghdr h;
		struct unix_diag_req r;
	} req;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.r.sdiag_family = AF_UNIX;
	req.r.udiag_states = ~0u;
	req.r.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	int rc = sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	static char buf[32768] __attribute__((aligned(8)));
	size_t cap = 0;
	for (bool end = false; rc == 0 && !end;) {
		const ssize_t got = recv(nl, buf, sizeof(buf), 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			break;
		}
		int len = (int)got;
		for (struct nlmsghdr *hd = (struct nlmsghdr *)buf; rc == 0 && NLMSG_OK(hd, len); hd = NLMSG_NEXT(hd, len)) {
			if (hd->nlmsg_type == NLMSG_DONE) {
				end = true;
				break;
			}
			if (hd->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(hd);
				rc = e->error ? e->error : -EIO;
				break;
			}
			const struct unix_diag_msg *m = NLMSG_DATA(hd);
			struct usock u = { .ino = m->udiag_ino };
			int alen = (int)(hd->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
			for (struct rtattr *a = (struct rtattr *)(m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
				if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(uint32_t)) {
					uint32_t peer;
					memcpy(&peer, RTA_DATA(a), sizeof(peer));
					u.peer = peer;
				} else if (a->rta_type == UNIX_DIAG_NAME && RTA_PAYLOAD(a) > 0) {
					/* An abstract name starts with a NUL: shown as '@'. */
					size_t l = RTA_PAYLOAD(a) < sizeof(u.name) - 1 ? RTA_PAYLOAD(a) : sizeof(u.name) - 1;
					memcpy(u.name, RTA_DATA(a), l);
					u.name[l] = 0;
					if (!u.name[0] && l > 1) {
						u.name[0] = '@';
						for (size_t k = 1; k < l; k++)
							if (!u.name[k])
								u.name[k] = '@';
					}
				}
			}
			if (*n == cap) {
				struct usock *nv = realloc(*v, (cap = cap ? 2 * cap : 256) * sizeof(*nv));
				if (!nv) {
					rc = -ENOMEM;
					break;
				}
				*v = nv;
			}
			(*v)[(*n)++] = u;
		}
	}
	close(nl);
	if (rc < 0) {
		free(*v);
		*v = NULL;
		*n = 0;
	}
	return rc;
}

/* The tree's unix sockets (those of its processes that share the caller's
 * network namespace: sock_diag answers for that one only) whose peer no
 * process of the tree holds. A failure to ask leaves them to CRIU. */
static void unix_outside(const struct held *h, size_t nh, struct sock_list *out)
{
	const uint64_t mine = proc_ns_ino(getpid(), "net");
	struct usock *v;
	size_t n;
	if (unix_dump(&v, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct held *x = held_find(h, nh, v[i].ino);
		if (!x || x->netns != mine || !v[i].peer || held_find(h, nh, v[i].peer))
			continue;
		if (!out->nunix_outside++) {
			out->unix_pid = x->pid;
			out->unix_ino = x->ino;
			for (size_t k = 0; k < n; k++)
				if (v[k].ino == v[i].peer)
					snprintf(out->unix_peer, sizeof(out->unix_peer), "%s", v[k].name);
		}
	}
	free(v);
}

int sock_list_tree(const struct proc_tree *t, struct sock_list *out)
{
	memset(out, 0, sizeof(*out));
	struct held *h = NULL;
	size_t nh = 0, hcap = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < t->n; i++)
		rc = held_add(t->pids[i], &h, &nh, &hcap);
	if (rc < 0 || nh == 0) {
		free(h);
		return rc;
	}
	qsort(h, nh, sizeof(*h), held_cmp);
	/* A socket shared across a fork is one socket: the first holder names it. */
	size_t u = 0;
	for (size_t i = 0; i < nh; i++)
		if (!u || h[u - 1].ino != h[i].ino)
			h[u++] = h[i];
	nh = u;
	/* One pass per network namespace the holders live in (crest run's
	 * tree shares the host's; a copy's has one of its own). */
	uint64_t *done = calloc(nh, sizeof(*done));
	size_t ndone = 0;
	if (!done)
		rc = crest_errf(-ENOMEM, "listing sockets");
	for (size_t i = 0; rc == 0 && i < nh; i++) {
		bool seen = false;
		for (size_t k = 0; k < ndone && !seen; k++)
			seen = done[k] == h[i].netns;
		if (seen)
			continue;
		done[ndone++] = h[i].netns;
		struct table tb = { 0 };
		size_t cap = 0;
		static const char *const names[] = { "tcp", "tcp6", "udp", "udp6" };
		for (size_t k = 0; rc == 0 && k < 4; k++)
			rc = table_read(h[i].pid, names[k], &tb, &cap);
		for (size_t k = 0; rc == 0 && k < tb.n; k++) {
			const struct entry *en = &tb.v[k];
			const struct held *x = en->ino ? held_find(h, nh, en->ino) : NULL;
			if (!x || x->netns != h[i].netns)
				continue;
			if (!out->ninet++) {
				out->inet_pid = x->pid;
				out->inet_ino = x->ino;
			}
			if (!en->tcp || en->state == SOCK_TCP_CLOSE)
				continue;   /* UDP, or not connected: CRIU makes it anew */
			struct sock_tcp *nv = realloc(out->v, (out->n + 1) * sizeof(*nv));
			if (!nv) {
				rc = crest_errf(-ENOMEM, "listing sockets");
				break;
			}
			out->v = nv;
			struct sock_tcp *s = &out->v[out->n++];
			memset(s, 0, sizeof(*s));
			s->pid = x->pid;
			s->ino = x->ino;
			s->state = en->state;
			s->port = (uint16_t)strtoul(port_of(en->local), NULL, 16);
			addr_format(en->local, en->v6, s->local, sizeof(s->local));
			addr_format(en->remote, en->v6, s->remote, sizeof(s->remote));
			if (en->state == SOCK_TCP_LISTEN) {
				out->nlisten++;
			} else if (peer_inside(en, &tb, h, nh, h[i].netns)) {
				out->ninside++;
			} else {
				s->outside = true;
				out->noutside++;
			}
		}
		free(tb.v);
	}
	free(done);
	if (rc == 0)
		unix_outside(h, nh, out);
	free(h);
	if (rc < 0)
		sock_list_free(out);
	return rc;
}

void sock_list_free(struct sock_list *l)
{
	free(l->v);
	memset(l, 0, sizeof(*l));
}

const struct sock_tcp *sock_first_outside(const struct sock_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].outside)
			return &l->v[i];
	return NULL;
}

/* TCP_TIME_WAIT in the kernel's numbering (include/net/tcp_states.h). */
#define SOCK_TCP_TIME_WAIT 6

static bool port_in(const uint16_t *ports, size_t n, uint16_t p)
{
	for (size_t i = 0; i < n; i++)
		if (ports[i] == p)
			return true;
	return false;
}

/* Sends one inet_diag request of type on nl. */
static int diag_send(int nl, uint16_t type, uint16_t flags, const struct inet_diag_req_v2 *r)
{
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} req;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = type;
	req.h.nlmsg_flags = flags;
	req.r = *r;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	return sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
}

/* The TIME_WAIT sockets of one family on those ports, into *ids. */
static int tw_list(int nl, int family, const uint16_t *ports, size_t n, struct inet_diag_sockid **ids,
		   size_t *nids, size_t *cap)
{
	struct inet_diag_req_v2 r = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
				      .idiag_states = 1u << SOCK_TCP_TIME_WAIT };
	int rc = diag_send(nl, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, &r);
	if (rc < 0)
		return rc;
	static char buf[32768] __attribute__((aligned(8)));
	for (;;) {
		const ssize_t got = recv(nl, buf, sizeof(buf), 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		int len = (int)got;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				return e->error ? e->error : -EIO;
			}
			const struct inet_diag_msg *m = NLMSG_DATA(h);
			if (!port_in(ports, n, ntohs(m->id.idiag_sport)))
				continue;
			if (*nids == *cap) {
				struct inet_diag_sockid *nv = realloc(*ids, (*cap = *cap ? 2 * *cap : 16) * sizeof(*nv));
				if (!nv)
					return -ENOMEM;
				*ids = nv;
			}
			(*ids)[(*nids)++] = m->id;
		}
	}
}

int sock_tw_end(const uint16_t *ports, size_t n, size_t *ended)
{
	*ended = 0;
	if (!n)
		return 0;
	const int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return crest_errf(-errno, "cannot open a sock_diag socket to end the job's TIME_WAIT sockets");
	static const int fams[2] = { AF_INET, AF_INET6 };
	int rc = 0;
	for (int f = 0; rc == 0 && f < 2; f++) {
		struct inet_diag_sockid *ids = NULL;
		size_t nids = 0, cap = 0;
		rc = tw_list(nl, fams[f], ports, n, &ids, &nids, &cap);
		if (rc < 0)
			rc = crest_errf(rc, "cannot list the TIME_WAIT sockets on the job's ports");
		for (size_t i = 0; rc == 0 && i < nids; i++) {
			struct inet_diag_req_v2 r = { .sdiag_family = (uint8_t)fams[f], .sdiag_protocol = IPPROTO_TCP,
						      .idiag_states = 1u << SOCK_TCP_TIME_WAIT, .id = ids[i] };
			rc = diag_send(nl, SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK, &r);
			char ack[512] __attribute__((aligned(8)));
			ssize_t len = 0;
			while (rc == 0 && (len = recv(nl, ack, sizeof(ack), 0)) < 0 && errno == EINTR)
				;
			if (rc == 0 && len < 0)
				rc = -errno;
			const struct nlmsghdr *h = (const struct nlmsghdr *)ack;
			int err = 0;
			if (rc == 0 && NLMSG_OK(h, (int)len) && h->nlmsg_type == NLMSG_ERROR)
				err = ((const struct nlmsgerr *)NLMSG_DATA(h))->error;
			/* Gone meanwhile (its minute ran out) is what was wanted. */
			if (rc == 0 && err && err != -ENOENT)
				rc = err;
			if (rc < 0)
				rc = crest_errf(rc, "cannot end a TIME_WAIT socket on port %u that the restored "
						"job needs (sock_diag destroy: the kernel needs CONFIG_INET_DIAG_DESTROY)",
						(unsigned)ntohs(ids[i].idiag_sport));
			else if (!err)
				(*ended)++;
		}
		free(ids);
	}
	close(nl);
	return rc;
}
