/* fs.h - small file-system helpers shared by capture/, restore/ and the
 * commands above them. */
#ifndef CREST_UTIL_FS_H
#define CREST_UTIL_FS_H

#include <stdbool.h>

/* Removes path and everything below it (no symlink is followed). 0 when
 * it is gone, or was never there; -errno of the last failure otherwise. */
int fs_rm_tree(const char *path);

/* Whether paths a and b name the same file or directory: both exist and
 * resolve (symlinks, "..") to one real path. */
bool fs_same_path(const char *a, const char *b);

/* Working directories in a shared place (images on /dev/shm) that a killed
 * owner cannot leak for good: a process killed with -9 runs no clean-up,
 * but the kernel drops its flocks.
 *
 * fs_workdir_make creates PARENT/PREFIXxxxxxx.lock, holds an flock on it
 * (*lock_fd, close-on-exec) and then creates the directory
 * PARENT/PREFIXxxxxxx (0700), whose path goes to dir (cap bytes). Its owner
 * may put more entries beside it, named dir + ".SUFFIX". 0 or -errno with a
 * message. fs_workdir_release removes the directory, those entries and the
 * lock. fs_workdir_sweep removes every such set under parent whose lock is
 * free (its owner ended) and returns how many it removed; it never touches
 * one whose lock is held, nor a PREFIX entry with no lock file beside it. */
int fs_workdir_make(const char *parent, const char *prefix, char *dir, unsigned long cap, int *lock_fd);
void fs_workdir_release(const char *dir, int lock_fd);
int fs_workdir_sweep(const char *parent, const char *prefix);

/* Opens rel, a relative path under the directory dirfd, without leaving
 * that directory and without following any symlink on the way, the last
 * component included: for paths in places other users may change (a
 * `crest get` destination, a job's directory), where a planted symlink
 * must not turn root's write into a write elsewhere. openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel has it, else one
 * O_NOFOLLOW openat per component. flags and mode as for openat (O_NOFOLLOW
 * and O_CLOEXEC are added). "" or "." opens dirfd itself again. Returns the
 * fd, or -errno with no message: -ELOOP for a symlink on the way, -EXDEV
 * for a ".." that would leave dirfd. */
int fs_openat_beneath(int dirfd, const char *rel, int flags, unsigned mode);

/* Opens the directory path names (absolute, or from the working
 * directory), following a symlink on the way, the last component
 * included, only where root or the caller (the effective uid) owns it:
 * the rule of the kernel's fs.protected_symlinks, everywhere rather than
 * in sticky directories alone. So root's `crest get SNAP /home/u/dest`
 * goes through /home -> /data/home (root's) but never through a `dest`
 * (or a directory above it) that u made a link to a root-only place.
 * Each component is opened O_NOFOLLOW from its parent's fd and a link is
 * judged by the very inode read (no window between check and use); at
 * most 40 links, as the kernel. With create, a missing last component is
 * made (mkdirat, mode) and *created says so. Returns an O_RDONLY |
 * O_DIRECTORY fd, or -errno with a message: -ELOOP (naming the link and
 * its owner) for a link of another user's. */
int fs_open_dir_owned(const char *path, int create, unsigned mode, int *created);

/* Splits rel at its last '/': the parent part goes to parent (cap bytes,
 * "" when rel has no '/'), and the last component is returned. */
const char *fs_split(const char *rel, char *parent, unsigned long cap);

#endif
