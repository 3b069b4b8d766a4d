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
// holding the one line "host H pid P started T" of the holder. The lock file is made exclusively
// (O_CREAT | O_EXCL), never through a symbolic link (O_NOFOLLOW); an existing one is taken only
// when it is a regular file holding such a line (a crashed job's), anything else of that name (a
// link, a user's file, an empty file no job fills) is refused, never written over. 0 and *fd_out
// (keep it open), or -1 with error_set naming the directory and the holder when another process
// has it (or the file that is not a lock of ours).
int fs_lock_dir(const char *dir, int *fd_out);
// fs_lock_dir_probe: the same checks without taking the lock or making anything (--preflight,
// the frame's claim before the run): 0 when dir/.lock is missing or a free lock of ours.
int fs_lock_dir_probe(const char *dir);
// fs_lock_file: the same lock on the file lock_path (e.g. "OUT.lock" beside a file output), the
// refusal naming "<key> <target>" and the holder. The lock is on the file lock_path names when it
// returns (a lock file removed and made again meanwhile by another job is noticed and taken
// afresh), so fs_unlock_file may remove it.
int fs_lock_file(const char *lock_path, const char *key, const char *target, int *fd_out);
// fs_lock_file_probe: fs_lock_file's checks, nothing taken or made (see fs_lock_dir_probe).
int fs_lock_file_probe(const char *lock_path, const char *key, const char *target);
// fs_unlock_file: remove lock_path, then release the lock (the next job makes the file again).
void fs_unlock_file(const char *lock_path, int fd);
// fs_same_path: 1 when a and b name one file or directory: the same device and inode when both
// exist; otherwise the same absolute path once the existing part is resolved (links, "..", ".").
int fs_same_path(const char *a, const char *b);
// fs_in_dir: 1 when path exists and is an entry of the directory dir (its parent is dir, by
// device and inode).
int fs_in_dir(const char *path, const char *dir);
// fs_under_dir: 1 when path exists (a link counts) and lies under the existing directory dir, at
// any depth: where its name is (its parent resolved) or where what it names is (resolved whole);
// the first name below dir on that path into first[n] ("drafter" for dir/drafter/config.json).
int fs_under_dir(const char *path, const char *dir, char *first, size_t n);
// fs_h5_name: 1 when name is PREFIX*.h5 or one of its temporaries (PREFIX*.h5.tmp.PID): the
// names this project's HDF5 writers give (trainset_writer) to the files they write under prefix.
int fs_h5_name(const char *name, const char *prefix);
// fs_unlock_dir: release it (closing the descriptor; the lock file stays).
void fs_unlock_dir(int fd);
