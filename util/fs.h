/* fs.h - small file-system helpers shared by capture/ and restore/. */
#ifndef CREST_UTIL_FS_H
#define CREST_UTIL_FS_H

/* Removes path and everything below it (no symlink is followed). 0 when
 * it is gone, or was never there; -errno of the last failure otherwise. */
int fs_rm_tree(const char *path);

#endif
