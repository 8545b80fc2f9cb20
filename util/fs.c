/* fs.c - file-system helpers; see fs.h. */
#include "util/fs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_rm_tree(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *e;
	char p[PATH_MAX + 256];
	int rc = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		struct stat sb;
		int r = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) ? fs_rm_tree(p) : (unlink(p) < 0 ? -errno : 0);
		if (r < 0)
			rc = r;
	}
	closedir(d);
	if (rmdir(path) < 0)
		rc = -errno;
	return rc;
}
