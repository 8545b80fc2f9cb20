/* spawn.c - crest's own program started as a helper; see spawn.h. */
#include "os/spawn.h"
#include "util/err.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

extern char **environ;

int spawn_self(char *const args[], const int *fds, size_t nfds, pid_t *pid)
{
	char exe[PATH_MAX];
	const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return crest_errf(-errno, "cannot find crest's own program");
	exe[n] = 0;
	char *argv[SPAWN_ARGS_MAX + 2] = { exe };
	size_t argc = 1;
	for (; args[argc - 1]; argc++) {
		if (argc > SPAWN_ARGS_MAX)
			return crest_errx(-E2BIG, "cannot start %s: more than %d arguments", exe, SPAWN_ARGS_MAX);
		argv[argc] = args[argc - 1];
	}
	/* posix_spawn, not fork: crest has other threads, and glibc's spawn
	 * runs nothing between its clone and the exec that could wait on a
	 * lock one of them holds (see os/criu.c). dup2 onto a fixed number
	 * leaves the copy open across the exec, whatever the original's flag. */
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	for (size_t i = 0; i < nfds; i++)
		posix_spawn_file_actions_adddup2(&fa, fds[i], SPAWN_FD + (int)i);
	posix_spawnattr_t at;
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	const int err = posix_spawn(pid, exe, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return err ? crest_errf(-err, "cannot run %s", exe) : 0;
}

void spawn_quiet_signals(void)
{
	static const int quiet[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP };
	for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
		signal(quiet[i], SIG_IGN);
}
