// fsutil.h: small file-system helpers shared by the run directory, checkpoints and feature files.
#pragma once
#include <stdio.h>

// fs_open_regular: the one way an input file is opened: open(path, O_RDONLY) without blocking (a
// FIFO given as a file would block in open until a writer came), then refused unless it is a
// regular file (a FIFO, /dev/zero or another device, a directory, a socket: reading those hangs or
// never ends). A file descriptor, or -1 with error_set("<what> <path>: not a regular file (a
// FIFO)" / "<what> <path>: cannot open: <reason>") and errno set (ENOENT etc., or EINVAL for a
// non-regular file). what may be NULL or "" (the message starts with the path).
int fs_open_regular(const char *path, const char *what);
// fs_fopen_regular: the same as a stdio stream ("rb"); NULL with error_set.
FILE *fs_fopen_regular(const char *path, const char *what);
// fs_check_regular: stat(path) (follows links; never opens it) and the same refusal, for a library
// that opens the file itself (HDF5). 0, or -1 with error_set as above.
int fs_check_regular(const char *path, const char *what);
// fs_mkdirs: create dir and any missing parents (like mkdir -p, mode 0755); an existing directory
// is fine. -1 with error_set naming the path that could not be made and why.
int fs_mkdirs(const char *dir);
// fs_write_text: write text to "<path>.tmp.<pid>", checking every step, then rename it over path
// (a reader never sees half a file); -1 with error_set naming the path and the OS's reason (a full
// disk shows here, not later), the temporary file removed and path untouched.
int fs_write_text(const char *path, const char *text);
// fs_remove_tree: rm -rf without a shell (no quoting of the path, no fork inside an MPI process;
// unlink needs no disk space, so it works on a full disk). Symbolic links are removed, never
// followed. A path that does not exist is fine. -1 with errno of the first failure otherwise.
int fs_remove_tree(const char *path);
// fs_lock_dir: an exclusive lock on dir for this process's life: dir/.lock, locked with fcntl
// (released by the kernel when the process dies, so a crashed job never blocks its own resume),
// holding "host pid start-time" of the holder. 0 and *fd_out (keep it open), or -1 with error_set
// naming the directory and the holder when another process has it.
int fs_lock_dir(const char *dir, int *fd_out);
// fs_unlock_dir: release it (closing the descriptor; the lock file stays).
void fs_unlock_dir(int fd);
