/*
 * spawn.h - crest's own program started again as a helper that must
 * outlive it: the guards of a checkpoint and of a restore (capture/guard.h,
 * restore/guard.h), which give a job back if crest dies holding it.
 */
#ifndef CREST_OS_SPAWN_H
#define CREST_OS_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

/* The first descriptor spawn_self hands on: fds[i] becomes SPAWN_FD + i. */
#define SPAWN_FD 3
/* The most arguments spawn_self passes after the program's name. */
#define SPAWN_ARGS_MAX 8

/* Starts /proc/self/exe with args (NULL-ended, at most SPAWN_ARGS_MAX) after
 * its own path, in a session of its own, so that the terminal's job control
 * does not reach it. fds[i] is open in it as SPAWN_FD + i, whatever its
 * close-on-exec flag here; nothing else is handed on but what is open
 * without that flag. The child's pid in *pid; 0, or -errno with a message. */
int spawn_self(char *const args[], const int *fds, size_t nfds, pid_t *pid);

/* For the helper, first thing: the signals a terminal sends its foreground
 * job (^C, ^\, ^Z, a hangup, kill's default, a closed pipe) ignored, so
 * that one meant for crest does not end the process that would give the
 * job back. */
void spawn_quiet_signals(void);

#endif
