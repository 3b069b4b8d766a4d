// fsutil.c: see fsutil.h.
#include "common/core/fsutil.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/error.h"

int fs_mkdirs(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return error_set("directory '%s': empty or too long a path", dir);
    memcpy(path, dir, n + 1);
    // every prefix ending at a '/', then the whole path
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char keep = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return error_set("directory %s: %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return error_set("directory %s: exists and is not a directory", path);
        path[i] = keep;
    }
    return 0;
}

int fs_write_text(const char *path, const char *text) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return error_set("%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return error_set("%s: %s", path, strerror(errno));
    size_t len = strlen(text);
    int bad = fwrite(text, 1, len, f) != len || fflush(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (!bad && rename(tmp, path) != 0) bad = 1, err = errno;
    if (bad) {
        remove(tmp); // ours, a regular file: never path itself
        return error_set("%s: %s", path, strerror(err));
    }
    return 0;
}
