/*
 * thp_model.c - os/thp.h against a model, randomized: holders that raise
 * the huge page setting, lower it, die without lowering, and repairs (as a
 * guard makes when its crest died) in random order, with the setting
 * checked after every step.
 *
 *   thp_model [SEED]
 *
 * Each holder is a child process (os/thp.h keys holders by pid and start
 * time): it raises, reports, then waits to be told to lower, or is killed
 * with SIGKILL and reaped. The model is the set of live holders and the
 * machine's own setting, drawn from always/madvise/never for each round:
 *  - while a holder lives, the setting is "always";
 *  - once none does and a lower or a repair ran, it is the machine's own;
 *  - a dead holder never repaired leaves "always", and the next raise saves
 *    the machine's own setting (STATE/saved), not "always".
 * Against a stand-in file and state directory in /tmp (CREST_THP_FILE,
 * CREST_THP_STATE): no root, and the machine's setting is never touched.
 * The seed is printed; CREST_TEST_SEED=N or an argument replays it.
 * Exit 0 when every check held, 1 otherwise.
 */
#include "os/thp.h"
#include "tests/check.h"
#include "util/err.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXH 6
#define ROUNDS 12
#define STEPS 40

static char file[256], state[256];
static uint64_t rng;

struct holder {
	pid_t pid;
	int cmd;   /* write end: a byte tells it to lower */
};

static const char *mode_now(void)
{
	static char buf[128];
	FILE *f = fopen(file, "r");
	buf[0] = 0;
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}
	char *s = strchr(buf, '[');
	if (s) {
		s++;
		s[strcspn(s, "]")] = 0;
		return s;
	}
	buf[strcspn(buf, " \n")] = 0;
	return buf;
}

/* A child that raises, says so (a byte on ready), then lowers when told. */
static int holder_start(struct holder *h)
{
	int ready[2], cmd[2];
	if (pipe(ready) < 0 || pipe(cmd) < 0)
		return -errno;
	const pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(ready[0]);
		close(cmd[1]);
		const char ok = os_thp_raise() == 0 ? 'r' : 'x';
		if (ok == 'x')
			fprintf(stderr, "thp_model: child %d: raise: %s\n", (int)getpid(), crest_errmsg());
		if (write(ready[1], &ok, 1) != 1)
			_exit(3);
		char b;
		if (read(cmd[0], &b, 1) == 1 && b == 'l')
			_exit(os_thp_lower() == 0 ? 0 : 4);
		_exit(0);
	}
	close(ready[1]);
	close(cmd[0]);
	char b = 0;
	const ssize_t n = read(ready[0], &b, 1);
	close(ready[0]);
	h->pid = pid;
	h->cmd = cmd[1];
	return n == 1 && b == 'r' ? 0 : -EIO;
}

static int reap(pid_t pid)
{
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return st;
}

int main(int argc, char **argv)
{
	const uint64_t seed = check_seed(argc, argv, 1);
	rng = check_state(seed);
	printf("thp_model: seed %llu (CREST_TEST_SEED=%llu replays it)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	char dir[] = "/tmp/crest-thp-model-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	snprintf(file, sizeof(file), "%s/enabled", dir);
	snprintf(state, sizeof(state), "%s/run/crest/thp", dir);
	setenv("CREST_THP_FILE", file, 1);
	setenv("CREST_THP_STATE", state, 1);
	static const char *const modes[] = { "madvise", "never", "always" };
	unsigned raises = 0, lowers = 0, kills = 0, repairs = 0;
	for (int round = 0; round < ROUNDS; round++) {
		const char *own = modes[check_rnd(&rng) % 3];
		FILE *f = fopen(file, "w");
		if (!f)
			return 1;
		/* As sysfs shows it: the choice in brackets. */
		fprintf(f, "%s%s%s %s%s%s %s%s%s\n", !strcmp(own, "always") ? "[" : "", "always",
			!strcmp(own, "always") ? "]" : "", !strcmp(own, "madvise") ? "[" : "", "madvise",
			!strcmp(own, "madvise") ? "]" : "", !strcmp(own, "never") ? "[" : "", "never",
			!strcmp(own, "never") ? "]" : "");
		fclose(f);
		struct holder h[MAXH];
		int n = 0;
		bool dirty = false;   /* a holder died and no repair or lower has run since */
		for (int step = 0; step < STEPS; step++) {
			const unsigned op = (unsigned)(check_rnd(&rng) % 4);
			char what[64];
			if ((op == 0 || n == 0) && n < MAXH) {
				if (holder_start(&h[n]) < 0) {
					printf("FAIL: round %d step %d: a holder could not raise\n", round, step);
					return 1;
				}
				snprintf(what, sizeof(what), "raise (%d holders)", n + 1);
				n++;
				raises++;
				dirty = false;   /* a raise repairs first */
				/* What it saved is the machine's own setting. */
				char saved[300], buf[64] = "";
				snprintf(saved, sizeof(saved), "%s/saved", state);
				FILE *s = fopen(saved, "r");
				if (!s || !fgets(buf, sizeof(buf), s)) {
					printf("FAIL: round %d step %d: nothing saved while %d holder(s) live\n", round, step, n);
					return 1;
				}
				fclose(s);
				buf[strcspn(buf, "\n")] = 0;
				CHECK(!strcmp(buf, own), "round %d step %d: saved '%s', the machine's own is '%s'", round,
				      step, buf, own);
			} else if (op == 1 && n > 0) {
				const int k = (int)(check_rnd(&rng) % (uint64_t)n);
				const char b = 'l';
				if (write(h[k].cmd, &b, 1) != 1)
					return 1;
				const int st = reap(h[k].pid);
				CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d step %d: a lower failed (%d)", round,
				      step, st);
				close(h[k].cmd);
				h[k] = h[--n];
				lowers++;
				dirty = dirty && n > 0;
				snprintf(what, sizeof(what), "lower (%d left)", n);
			} else if (op == 2 && n > 0) {
				const int k = (int)(check_rnd(&rng) % (uint64_t)n);
				kill(h[k].pid, SIGKILL);
				reap(h[k].pid);
				close(h[k].cmd);
				h[k] = h[--n];
				kills++;
				dirty = dirty || n == 0;
				snprintf(what, sizeof(what), "kill -9 (%d left)", n);
			} else {
				const int rc = os_thp_repair();
				CHECK(rc == (n > 0 ? 1 : 0), "round %d step %d: repair gave %d with %d holder(s) live", round,
				      step, rc, n);
				repairs++;
				if (n == 0)
					dirty = false;
				snprintf(what, sizeof(what), "repair (%d live)", n);
			}
			const char *now = mode_now();
			const char *want = n > 0 || dirty ? "always" : own;
			CHECK(!strcmp(now, want), "round %d step %d, after %s: the setting is '%s', the model says '%s'",
			      round, step, what, now, want);
			if (failures)
				break;
		}
		/* The round's end: every holder lowers, and the machine's own
		 * setting is back. */
		for (int k = 0; k < n; k++) {
			const char b = 'l';
			if (write(h[k].cmd, &b, 1) != 1)
				return 1;
			reap(h[k].pid);
			close(h[k].cmd);
		}
		if (os_thp_repair() < 0)
			return 1;
		CHECK(!strcmp(mode_now(), own), "round %d: at its end the setting is '%s', not the machine's '%s'", round,
		      mode_now(), own);
		if (failures)
			break;
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		return 1;
	if (failures) {
		printf("thp_model: FAILED; seed %llu\n", (unsigned long long)seed);
		return 1;
	}
	printf("thp_model: ok: %d rounds, %u raises, %u lowers, %u holders killed, %u repairs; the setting matched "
	       "the model after every step\n", ROUNDS, raises, lowers, kills, repairs);
	return 0;
}
