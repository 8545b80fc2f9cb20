/*
 * gpu_here.h - whether a GPU test may skip. It may only where there is no
 * NVIDIA GPU here: no /dev/nvidia<N> device node, or no driver library
 * (libcuda.so.1, or $CREST_LIBCUDA) to load. Anything else - a driver that
 * loads but fails, a driver that sees no GPU next to a device node - is a
 * GPU that is present and broken: the test must fail on it, not skip, or a
 * broken GPU machine reads as a machine without one.
 * Included once per test program.
 */
#ifndef CREST_TESTS_GPU_HERE_H
#define CREST_TESTS_GPU_HERE_H

#include <dlfcn.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* True, with why filled ("no GPU here (...)"), where the test may skip.
 * CREST_TEST_FAKE_GPU=1 with CREST_LIBCUDA naming a stand-in driver
 * (tests/library/fake_device.c) runs the test on it, device node or not:
 * the library's device path on every machine. */
static inline bool no_gpu_here(char *why, size_t cap)
{
	const char *fake = getenv("CREST_TEST_FAKE_GPU"), *fake_lib = getenv("CREST_LIBCUDA");
	if (fake && !strcmp(fake, "1") && fake_lib && *fake_lib)
		return false;
	glob_t g;
	const int nodes = glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
	if (nodes)
		globfree(&g);
	if (!nodes) {
		snprintf(why, cap, "no GPU here (no /dev/nvidia<N> device node)");
		return true;
	}
	const char *lib = getenv("CREST_LIBCUDA");
	if (!lib || !*lib)
		lib = "libcuda.so.1";
	void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
	if (!h) {
		snprintf(why, cap, "no GPU here (%d device node(s), but no driver library: %s)", nodes, dlerror());
		return true;
	}
	dlclose(h);
	return false;
}

/* A GPU test's start: 77 with "SKIP: no GPU here (...)" printed where it
 * may skip, 1 with a FAIL line where a GPU is here but its driver does not
 * load, else 0 with *d loaded. (Include gpu/cudrv.h first.) */
static inline int gpu_test_start(const struct cudrv **d)
{
	char why[512];
	if (no_gpu_here(why, sizeof(why))) {
		printf("SKIP: %s\n", why);
		return 77;
	}
	if (cudrv_load(d) < 0) {
		fprintf(stderr, "FAIL: a GPU is here but its driver does not load: %s\n", crest_errmsg());
		return 1;
	}
	return 0;
}

#endif
