// test_fsutil.c: fs_mkdirs (nested, existing, blocked by a file), fs_write_text (written back
// byte for byte; a path it cannot write gives the OS's reason and leaves nothing behind),
// fs_remove_tree (names with quotes, spaces, $(), newlines; a symbolic link is removed, not
// followed) and fs_lock_dir (a second holder is refused naming the first; released on close and
// when the holder dies); fs_lock_file (an output's lock: a second holder refused naming the output
// key and the holder, the file removed at unlock and taken afresh), fs_same_path (one file under
// two spellings, a link, a path that does not exist yet) and fs_in_dir; fs_h5_name. A lock file is
// made exclusively (issue 49): a user's file, an empty file or a link of that name is refused and
// left as it was, a stale lock line of ours is taken again; the probes test without making
// anything; fs_under_dir finds an input inside an output directory (a link's name counts).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/core/fsutil.h"
#include "testing.h"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

// A tree whose names would break any shell command built from them, with a link out of it.
static void check_remove_tree(void) {
    static const char *names[] = {"it's", "a b", "$(touch pwned)", "new\nline", "`x`;rm -rf ~", "\"q\""};
    char root[1024], keep[1024], path[2048];
    snprintf(root, sizeof root, "%s/tree '$(x)' \n", test_tmpdir());
    snprintf(keep, sizeof keep, "%s/keep", test_tmpdir());
    CHECK(fs_mkdirs(keep) == 0);
    snprintf(path, sizeof path, "%s/precious", keep);
    CHECK(test_write_file(path, "x", 1) == 0);
    CHECK(fs_mkdirs(root) == 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        CHECK(fs_mkdirs(path) == 0);
        snprintf(path, sizeof path, "%s/%s/%s.bin", root, names[i], names[i]);
        CHECK(test_write_file(path, "data", 4) == 0);
    }
    snprintf(path, sizeof path, "%s/link", root);
    CHECK(symlink(keep, path) == 0);
    CHECK(fs_remove_tree(root) == 0);
    CHECK(!exists(root));
    snprintf(path, sizeof path, "%s/precious", keep);
    CHECK_MSG(exists(path), "the tree's link was followed: %s is gone", path);
    CHECK(access("pwned", F_OK) != 0);
    CHECK(fs_remove_tree(root) == 0); // already gone: fine
    CHECK(fs_remove_tree(path) == 0); // a plain file
    CHECK(!exists(path));
}

static void check_lock(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/run dir's", test_tmpdir());
    CHECK(fs_mkdirs(dir) == 0);
    int fd = -1;
    CHECK(fs_lock_dir(dir, &fd) == 0 && fd >= 0);
    // fcntl locks belong to the process: a second holder has to be another process
    pid_t child = fork();
    if (child == 0) {
        int fd2 = -1;
        int rc = fs_lock_dir(dir, &fd2);
        const char *m = error_msg();
        char pid[32];
        snprintf(pid, sizeof pid, "pid %lld", (long long)getppid());
        _exit(rc != 0 && strstr(m, "is in use by another job") && strstr(m, pid) && strstr(m, "host ") ? 0 : 1);
    }
    int st = 0;
    waitpid(child, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a second process took the lock, or its message lacks the holder");
    fs_unlock_dir(fd);
    // released: another process takes it; it dies holding it (no unlock), and the lock is free again
    child = fork();
    if (child == 0) {
        int fd2 = -1;
        _exit(fs_lock_dir(dir, &fd2) == 0 ? 0 : 1);
    }
    waitpid(child, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(fs_lock_dir(dir, &fd) == 0);
    fs_unlock_dir(fd);
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/no/such/dir", test_tmpdir());
    CHECK_ERR(fs_lock_dir(missing, &fd), "cannot open its lock file");
}

static void check_output_lock(void) {
    char out[1024], lock[1100];
    snprintf(out, sizeof out, "%s/set.h5", test_tmpdir());
    snprintf(lock, sizeof lock, "%s.lock", out);
    int fd = -1;
    CHECK(fs_lock_file(lock, "regenerate.out", out, &fd) == 0 && fd >= 0);
    pid_t child = fork();
    if (child == 0) {
        int fd2 = -1;
        int rc = fs_lock_file(lock, "regenerate.out", out, &fd2);
        const char *m = error_msg();
        char pid[32];
        snprintf(pid, sizeof pid, "pid %lld", (long long)getppid());
        _exit(rc != 0 && strstr(m, "regenerate.out") && strstr(m, out) && strstr(m, "is in use by another job") &&
                      strstr(m, pid) && strstr(m, "choose another regenerate.out")
                  ? 0
                  : 1);
    }
    int st = 0;
    waitpid(child, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a second process took the output's lock, or its message lacks the holder");
    fs_unlock_file(lock, fd);
    CHECK_MSG(!exists(lock), "the lock file %s stayed after the unlock", lock);
    CHECK(fs_lock_file(lock, "regenerate.out", out, &fd) == 0);
    fs_unlock_file(lock, fd);

    // one file, several spellings; a link to it; a path not there yet
    char a[1100], b[1200], link[1100], none1[1100], none2[1200];
    snprintf(a, sizeof a, "%s/prompts.jsonl", test_tmpdir());
    CHECK(test_write_file(a, "{}", 2) == 0);
    snprintf(b, sizeof b, "%s/./a/../prompts.jsonl", test_tmpdir());
    snprintf(link, sizeof link, "%s/link.jsonl", test_tmpdir());
    CHECK(symlink(a, link) == 0);
    CHECK(fs_same_path(a, b) == 1);
    CHECK(fs_same_path(a, link) == 1);
    CHECK(fs_same_path(a, out) == 0);
    snprintf(none1, sizeof none1, "%s/new.h5", test_tmpdir());
    snprintf(none2, sizeof none2, "%s/a/../new.h5", test_tmpdir());
    CHECK(fs_same_path(none1, none2) == 1);
    CHECK(fs_same_path(none1, a) == 0);
    CHECK(fs_in_dir(a, test_tmpdir()) == 1);
    CHECK(fs_in_dir(b, test_tmpdir()) == 1);
    CHECK(fs_in_dir(none1, test_tmpdir()) == 0); // not there: no file of the directory
    CHECK(fs_h5_name("part-00001-of-00004.h5", "part-") == 1);
    CHECK(fs_h5_name("part-00001-of-00004.h5.tmp.123", "part-") == 1);
    CHECK(fs_h5_name("part-00001-of-00004.h5.tmp.x", "part-") == 0);
    CHECK(fs_h5_name("notes.h5", "part-") == 0);
}

static int same_text(const char *p, const char *want) {
    char got[256] = {0};
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f) fclose(f);
    return n == strlen(want) && strcmp(got, want) == 0;
}

// issue 49: what is at a lock file's name and is not a lock of ours is never written over.
static void check_lock_foreign(void) {
    char out[1024], lock[1100], user[1100], dir[1024], first[300];
    snprintf(out, sizeof out, "%s/f.h5", test_tmpdir());
    snprintf(lock, sizeof lock, "%s.lock", out);
    snprintf(user, sizeof user, "%s/user.txt", test_tmpdir());
    CHECK(test_write_file(user, "mine\n", 5) == 0);
    int fd = -1;
    // a user's file of that name
    CHECK(test_write_file(lock, "mine\n", 5) == 0);
    CHECK_ERR(fs_lock_file(lock, "regenerate.out", out, &fd), "exists and is not a lock file of this project");
    CHECK_ERR(fs_lock_file_probe(lock, "regenerate.out", out), "exists and is not a lock file of this project");
    CHECK(same_text(lock, "mine\n"));
    // an empty one (no job fills it)
    CHECK(test_write_file(lock, "", 0) == 0);
    CHECK_ERR(fs_lock_file(lock, "regenerate.out", out, &fd), "(an empty file)");
    CHECK(exists(lock));
    // a link to a user's file, and a dangling one: never followed
    CHECK(unlink(lock) == 0 && symlink(user, lock) == 0);
    CHECK_ERR(fs_lock_file(lock, "regenerate.out", out, &fd), "is a symbolic link");
    CHECK_ERR(fs_lock_file_probe(lock, "regenerate.out", out), "is a symbolic link");
    CHECK(same_text(user, "mine\n"));
    snprintf(dir, sizeof dir, "%s/nothing", test_tmpdir());
    CHECK(unlink(lock) == 0 && symlink(dir, lock) == 0);
    CHECK_ERR(fs_lock_file(lock, "regenerate.out", out, &fd), "is a symbolic link");
    CHECK(!exists(dir));
    // a crashed job's lock line: taken again (this job's line now), removed at unlock
    CHECK(unlink(lock) == 0);
    CHECK(test_write_file(lock, "host gone pid 4 started then\n", 29) == 0);
    CHECK(fs_lock_file_probe(lock, "regenerate.out", out) == 0);
    CHECK(fs_lock_file(lock, "regenerate.out", out, &fd) == 0 && fd >= 0);
    char line[64];
    snprintf(line, sizeof line, " pid %lld started ", (long long)getpid());
    FILE *f = fopen(lock, "r");
    char got[256] = {0};
    if (f) {
        CHECK(fread(got, 1, sizeof got - 1, f) > 0);
        fclose(f);
    }
    CHECK_MSG(strncmp(got, "host ", 5) == 0 && strstr(got, line), "the lock line is not this job's: %s", got);
    fs_unlock_file(lock, fd);
    CHECK(!exists(lock));
    // run.dir's lock: a probe makes nothing
    snprintf(dir, sizeof dir, "%s/rd", test_tmpdir());
    CHECK(fs_mkdirs(dir) == 0 && fs_lock_dir_probe(dir) == 0);
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    CHECK(!exists(lock));
    CHECK(symlink(user, lock) == 0);
    CHECK_ERR(fs_lock_dir(dir, &fd), "is a symbolic link");
    CHECK(same_text(user, "mine\n"));
    // fs_under_dir: at any depth, the first name below the directory; a link's own name counts
    char in[1200];
    snprintf(in, sizeof in, "%s/sub", dir);
    CHECK(fs_mkdirs(in) == 0);
    snprintf(in, sizeof in, "%s/sub/x.json", dir);
    CHECK(test_write_file(in, "{}", 2) == 0);
    CHECK(fs_under_dir(in, dir, first, sizeof first) == 1 && strcmp(first, "sub") == 0);
    CHECK(fs_under_dir(lock, dir, first, sizeof first) == 1 && strcmp(first, ".lock") == 0);
    CHECK(fs_under_dir(user, dir, first, sizeof first) == 0);
    CHECK(fs_under_dir(dir, dir, first, sizeof first) == 0);
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
    check_remove_tree();
    check_lock();
    check_output_lock();
    check_lock_foreign();
    return test_finish("test_fsutil");
}
