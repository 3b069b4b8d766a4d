// test_fsutil.c: fs_mkdirs (nested, existing, blocked by a file) and fs_write_text (written back
// byte for byte; a path it cannot write gives the OS's reason and leaves nothing behind).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/core/fsutil.h"
#include "testing.h"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(void) {
    char nested[1024];
    snprintf(nested, sizeof nested, "%s/a/b/c", test_tmpdir());
    CHECK(fs_mkdirs(nested) == 0);
    CHECK(is_dir(nested));
    CHECK(fs_mkdirs(nested) == 0); // already there
    char with_slash[1100];
    snprintf(with_slash, sizeof with_slash, "%s/", nested);
    CHECK(fs_mkdirs(with_slash) == 0);

    char file[1024], under[1100];
    snprintf(file, sizeof file, "%s", test_path("plain"));
    CHECK(test_write_file(file, "x", 1) == 0);
    snprintf(under, sizeof under, "%s/sub/dir", file);
    CHECK_ERR(fs_mkdirs(under), "is not a directory");
    CHECK_ERR(fs_mkdirs(""), "empty");

    char text_path[1100];
    snprintf(text_path, sizeof text_path, "%s/config.json", nested);
    const char *text = "{\"a\": 1}\n";
    CHECK(fs_write_text(text_path, text) == 0);
    FILE *f = fopen(text_path, "r");
    char back[64] = {0};
    size_t n = f ? fread(back, 1, sizeof back - 1, f) : 0;
    if (f) fclose(f);
    CHECK(n == strlen(text) && strcmp(back, text) == 0);
    CHECK_ERR(fs_write_text(nested, text), "Is a directory"); // the rename cannot replace a directory
    CHECK(is_dir(nested));
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/nowhere/x.json", test_tmpdir());
    CHECK_ERR(fs_write_text(missing, text), "No such file or directory");
    // no temporary file is left beside the directory that could not be replaced
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", nested, (int)getpid());
    CHECK(access(tmp, F_OK) != 0);
    return test_finish("test_fsutil");
}
