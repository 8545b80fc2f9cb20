/*
 * sock.h - the internet sockets a process tree holds, as /proc shows them,
 * so that a checkpoint knows before anything is frozen what CRIU will be
 * asked to save.
 *
 * A TCP socket of the tree is one of: unconnected (CRIU makes a new one),
 * listening (CRIU saves it as it is), a connection whose other end another
 * process of the tree holds (both ends are in the snapshot: CRIU saves and
 * restores the connection, --tcp-established), or a connection to a peer
 * outside the tree (another process of this host, another host): CRIU can
 * save only its own end, and a restored job would hold half a connection
 * that nobody answers, so crest refuses those unless the user drops them.
 *
 * Found by matching the socket inodes of each process's descriptors
 * (/proc/PID/fd: "socket:[INODE]") against its network namespace's TCP
 * and UDP tables (/proc/PID/net/{tcp,tcp6,udp,udp6}), where the peer of a
 * connection is the entry whose local and remote addresses are this one's
 * swapped.
 */
#ifndef CREST_OS_SOCK_H
#define CREST_OS_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "os/proc.h"

/* The kernel's TCP states (include/net/tcp_states.h) that matter here. */
#define SOCK_TCP_ESTABLISHED 1
#define SOCK_TCP_CLOSE 7
#define SOCK_TCP_LISTEN 10

struct sock_tcp {
	pid_t pid;                 /* a process of the tree that holds it */
	uint64_t ino;
	int state;                 /* SOCK_TCP_* or another of the kernel's */
	bool outside;              /* a connection whose peer the tree does not hold */
	uint16_t port;             /* its local port */
	char local[64], remote[64];   /* "127.0.0.1:8080", "[::1]:8080" */
};

struct sock_list {
	struct sock_tcp *v;        /* the tree's TCP sockets, each once */
	size_t n;
	size_t nlisten, ninside, noutside;
	/* Every internet socket of the tree, UDP ones too, and one of them:
	 * CRIU 4.1 cannot dump any on Linux >= 6.16 (os/CRIU-NOTES.md). */
	size_t ninet;
	pid_t inet_pid;
	uint64_t inet_ino;
	/* Unix sockets connected to a peer outside the tree (sock_diag, in the
	 * caller's network namespace): CRIU cannot dump one ("Can't dump half
	 * of stream unix connection", "External socket is used"), and says
	 * so only once the tree is frozen. The first one: */
	size_t nunix_outside;
	pid_t unix_pid;
	uint64_t unix_ino;
	char unix_peer[112];       /* the peer's address ("/run/x.sock", "@abstract"), or "" */
};

/* The tree's internet sockets, and its unix sockets connected outside it.
 * A process gone meanwhile is left out (CRIU will say so); -ENOMEM with a
 * message. Where sock_diag cannot be asked, unix sockets are left to CRIU. */
int sock_list_tree(const struct proc_tree *t, struct sock_list *out);
void sock_list_free(struct sock_list *l);

/* The first connection to a peer outside the tree, or NULL. */
const struct sock_tcp *sock_first_outside(const struct sock_list *l);

/* Ends the TIME_WAIT sockets of the caller's network namespace whose local
 * port is one of ports[0..n) (sock_diag's SOCK_DESTROY), and says how
 * many into *ended. Why: a job killed after its checkpoint leaves its
 * connections in TIME_WAIT for a minute, and one made without
 * SO_REUSEADDR (or its listener) then blocks the bind of the very socket
 * a restore brings back ("Address already in use"). CRIU's own kill ends
 * sockets in repair mode, with no TIME_WAIT; crest's jobs are killed by
 * whoever. Those sockets are the dead job's: nothing holds them. */
int sock_tw_end(const uint16_t *ports, size_t n, size_t *ended);

#endif
