/*
 * criu.h - running CRIU 4 through its command line.
 *
 * crest uses the criu installed by scripts/install-criu.sh (a private prefix
 * with its own libc and loader), or $CREST_CRIU. Success is criu's exit
 * status; on failure the error lines of criu's log are quoted in the message
 * (criu logs a harmless RLIMIT_NOFILE "Error" on every run, left out).
 */
#ifndef CREST_OS_CRIU_H
#define CREST_OS_CRIU_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct criu {
	char path[4096];
	int major, minor, sub;
};

/* Whether a hardware breakpoint set through ptrace stops a task on this
 * machine, asked once per process (in a traced child). Where it does not,
 * criu runs with CRIU_FAULT=130 (no breakpoints), unless the caller's
 * environment sets CRIU_FAULT: criu 4.1.1 otherwise waits for good for a
 * trap that never comes (os/CRIU-NOTES.md). */
bool criu_breakpoints_fire(void);

/* Whether this criu locks the network with nftables (criu check --feature
 * network_lock_nftables: 4.x built with libnftables, on a kernel with
 * nf_tables), asked once per process and path. */
bool criu_nftables(const struct criu *c);

/* Whether criu can lock the host's network for a TCP dump here: with
 * nftables, or with its default, iptables, whose iptables-restore must
 * then be on PATH. Where neither is, a dump with --tcp-established fails
 * ("Iptables configuration failed") once the tree is frozen. */
bool criu_net_lockable(const struct criu *c);

/* Whether this criu can dump an internet socket on the running kernel:
 * criu 4.1 cannot on Linux >= 6.16, which restricted SO_PASSCRED to unix
 * sockets (criu issues #2705/#2718, fixed in 4.2). */
bool criu_dumps_inet(const struct criu *c);

/* Finds criu 4 or later: $CREST_CRIU, then .deps/criu/criu beside the
 * source tree this crest was built from or run in. */
int criu_find(struct criu *c);

struct criu_dump_opts {
	pid_t pid;
	const char *dir;           /* images directory, exists */
	bool leave_running;
	bool leave_stopped;        /* neither: criu kills the tree after the dump */
	bool shell_job;            /* the root is not a session leader */
	const char *action_script; /* an executable criu runs at each step, or NULL */
	/* The tree has a mount namespace of its own (crest run): CRIU dumps
	 * it, each mount it shares with the host as external (mnt[]), and
	 * each of `external` (proc_extfds keys) as a file it must not open. */
	bool mntns;
	const char *const *external;
	size_t nexternal;
	/* It has a network namespace of its own (a copy's, see new_net below):
	 * its inode. The namespace is not dumped (CRIU would save and restore
	 * its firewall with iptables) but named external: a restore gives the
	 * tree a fresh one. */
	uint64_t netns;
	/* TCP connections (os/sock.h): tcp_established saves them (both ends
	 * must be in the tree), tcp_close leaves them out (a restore gives
	 * the job each one closed). Either way the network is locked while
	 * CRIU works with nftables where this criu can (criu_nftables), since
	 * many hosts have no iptables for CRIU's default lock. */
	bool tcp_established;
	bool tcp_close;
	/* The largest deleted file the tree still holds or maps (a "ghost":
	 * NCCL keeps its proxy buffers in an unlinked /dev/shm file, 33 MiB
	 * for 2 ranks seen with NCCL 2.28) whose contents go into the images;
	 * criu's --ghost-limit. 0: criu's own default, 1 MiB, which such a
	 * job fails ("Can't dump ghost file ... increase limit"). */
	uint64_t ghost_limit;
	/* The images go to an image streamer on dir's streamer-capture.sock
	 * (os/criustream.h, capture/imgstream.h), not into files in dir. */
	bool stream;
};
int criu_dump(const struct criu *c, const struct criu_dump_opts *o);

/* A descriptor the restored tree gets in place of a file it had open:
 * criu's --inherit-fd fd[FD]:KEY, KEY being the file's path without its
 * leading '/', or the key it was dumped under as external. CRIU dups fd
 * for every descriptor of that file, with no size check and no seek: the
 * caller opens it where the job is to go on. */
struct criu_inherit {
	int fd;
	const char *path;          /* absolute, as the dump saw it; or NULL and: */
	const char *key;           /* an external file's key (criu_dump_opts) */
};

struct criu_restore_opts {
	const char *dir;
	bool shell_job;
	bool mntns;                /* dumped with criu_dump_opts.mntns: its mounts come back from the host's */
	/* The tree comes back in a network namespace of its own, loopback up:
	 * a copy beside a running original, whose sockets hold the addresses
	 * (abstract unix ones too: the CUDA driver binds one) the copy's have;
	 * and always a tree dumped with criu_dump_opts.netns (net_external). */
	bool new_net;
	bool net_external;
	/* The images come from an image streamer on dir's streamer-serve.sock
	 * (restore/imgsrv.h), not from files in dir. */
	bool stream;
	/* The dump's TCP flags (criu_dump_opts), which the images need back. */
	bool tcp_established;
	bool tcp_close;
	const char *action_script; /* an executable criu runs at each step, or NULL */
	const struct criu_inherit *inherit;
	size_t ninherit;
	pid_t *pid_out;            /* the restored root */
	/* Told criu's pid as soon as it runs (restore/guard.h), or NULL. */
	void (*started)(void *arg, pid_t criu);
	void *started_arg;
};
int criu_restore(const struct criu *c, const struct criu_restore_opts *o);

/* CRIU's pidfile in a restore's images directory, DIR/restored.pid: the
 * restored root's pid, written only once the restore succeeded
 * (criu_restore removes it first). criu_restored: whether it is there,
 * that is, whether the tree came up. criu_restored_pid: the pid in it
 * (1..INT32_MAX) into *out, or *out = 0 and -EINVAL "no pid in PATH". */
bool criu_restored(const char *dir);
int criu_restored_pid(const char *dir, pid_t *out);

#endif
