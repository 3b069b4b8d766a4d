// fsutil.h: small file-system helpers shared by the run directory, checkpoints and feature files.
#pragma once

// fs_mkdirs: create dir and any missing parents (like mkdir -p, mode 0755); an existing directory
// is fine. -1 with error_set naming the path that could not be made and why.
int fs_mkdirs(const char *dir);
// fs_write_text: write text to "<path>.tmp.<pid>", checking every step, then rename it over path
// (a reader never sees half a file); -1 with error_set naming the path and the OS's reason (a full
// disk shows here, not later), the temporary file removed and path untouched.
int fs_write_text(const char *path, const char *text);
